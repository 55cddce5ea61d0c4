"""PPO hyperparameters. Defaults are tuned for CartPole-v1 (16 envs) on a 2-core CPU."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class PPOConfig:
    """PPO settings.

    Attributes:
      learning_rate: Adam step size.
      rollout_length: vector steps per rollout (one replay item holds ``rollout_length`` steps of
        every env of one actor).
      rollouts_per_update: rollouts (replay items) per learner update.
      num_epochs: passes over each update's rollouts.
      num_minibatches: SGD steps per pass; each takes ``rollout_length / num_minibatches``
        random steps of every env sequence (so it must divide ``rollout_length``).
      discount: gamma.
      gae_lambda: lambda of generalized advantage estimation.
      clip_epsilon: the policy ratio is clipped to ``[1 - eps, 1 + eps]``.
      value_coef / entropy_coef: weights of the value loss and the entropy bonus.
      max_gradient_norm: global gradient-norm clip.
      normalize_advantages: standardize advantages per minibatch (over all devices).
      hidden_sizes: widths of the policy's and the value function's hidden layers (two MLPs).
      variable_update_period: vector steps between an actor's parameter pulls.
      max_policy_lag: (distributed) a rollout acted with params more than this many learner
        updates old is dropped, not trained on; drops are counted and the lag is logged.
      queue_capacity: rollouts the replay queue holds; actors wait while it is full.
    """

    learning_rate: float = 1e-3
    rollout_length: int = 32
    rollouts_per_update: int = 1
    num_epochs: int = 4
    num_minibatches: int = 4
    discount: float = 0.99
    gae_lambda: float = 0.95
    clip_epsilon: float = 0.2
    value_coef: float = 0.5
    entropy_coef: float = 0.01
    max_gradient_norm: float = 0.5
    normalize_advantages: bool = True
    hidden_sizes: tuple[int, ...] = (64, 64)
    variable_update_period: int = 1
    max_policy_lag: int = 8
    queue_capacity: int = 8
