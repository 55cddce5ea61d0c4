"""IMPALA hyperparameters. Defaults are tuned for CartPole-v1 (16 envs) on a 2-core CPU."""

from __future__ import annotations

import dataclasses

from shoal.core.settings import setting


@dataclasses.dataclass
class IMPALAConfig:
    """IMPALA (actor-critic with V-trace) settings.

    Attributes:
      learning_rate: Adam step size.
      rollout_length: vector steps per sequence (one replay item holds ``rollout_length`` steps
        of every env of one actor).
      sequences_per_update: env sequences per SGD step (the global batch; a multiple of the
        actor's ``num_envs``: whole replay items are sampled).
      discount: gamma.
      vtrace_lambda: lambda of the V-trace targets (1: the paper's).
      clip_rho_threshold / clip_pg_rho_threshold: truncation of the importance weights in the
        value targets / in the policy-gradient advantage (rho-bar, and the pg rho-bar).
      baseline_coef / entropy_coef: weights of the value loss and the entropy bonus.
      max_gradient_norm: global gradient-norm clip.
      hidden_sizes: widths of the policy's and the value function's hidden layers (two MLPs).
      torso: for image observations (rank-3 uint8 frames): the convolutional torso, ``nature``
        (the Nature DQN network), ``impala`` (the IMPALA ResNet), ``minatar`` (MinAtar's one
        convolution and dense 128) or ``auto`` (``nature`` for frames of 36x36 or more, else
        ``minatar``); ``hidden_sizes`` then do not apply.
      eval_sample: evaluate the policy's samples, not its most likely action (the Atari preset,
        as the IMPALA paper reports its scores).
      variable_update_period: vector steps between an actor's parameter pulls.
      queue_capacity: sequences (items) waiting in replay; beyond it the oldest is dropped, so
        actors never wait for the learner.
    """

    learning_rate: float = setting(3e-3, low=0.0, low_open=True, high=1.0)
    rollout_length: int = setting(16, low=1, high=100_000)
    sequences_per_update: int = setting(16, low=1, high=1_000_000)
    discount: float = setting(0.99, low=0.0, high=1.0)
    vtrace_lambda: float = setting(1.0, low=0.0, high=1.0)
    clip_rho_threshold: float = setting(1.0, low=0.0, low_open=True, high=1_000.0)
    clip_pg_rho_threshold: float = setting(1.0, low=0.0, low_open=True, high=1_000.0)
    baseline_coef: float = setting(0.5, low=0.0, high=1_000.0)
    entropy_coef: float = setting(0.01, low=0.0, high=1_000.0)
    max_gradient_norm: float = setting(10.0, low=0.0, low_open=True)
    hidden_sizes: tuple[int, ...] = setting((64, 64), low=1, high=65_536, items=True)
    torso: str = "auto"
    eval_sample: bool = False
    variable_update_period: int = setting(1, low=1, high=1_000_000)
    queue_capacity: int = setting(64, low=1, high=1_000_000)
