"""IMPALA hyperparameters. Defaults are tuned for CartPole-v1 (16 envs) on a 2-core CPU."""

from __future__ import annotations

import dataclasses


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
      variable_update_period: vector steps between an actor's parameter pulls.
      queue_capacity: sequences (items) waiting in replay; beyond it the oldest is dropped, so
        actors never wait for the learner.
    """

    learning_rate: float = 3e-3
    rollout_length: int = 16
    sequences_per_update: int = 16
    discount: float = 0.99
    vtrace_lambda: float = 1.0
    clip_rho_threshold: float = 1.0
    clip_pg_rho_threshold: float = 1.0
    baseline_coef: float = 0.5
    entropy_coef: float = 0.01
    max_gradient_norm: float = 10.0
    hidden_sizes: tuple[int, ...] = (64, 64)
    variable_update_period: int = 1
    queue_capacity: int = 64
