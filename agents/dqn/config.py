"""DQN hyperparameters. Defaults are tuned for CartPole-v1 on a 2-core CPU."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class DQNConfig:
    """DQN settings. Replay sizes count transitions (env steps), not Reverb items.

    Attributes:
      learning_rate: Adam step size.
      batch_size: transitions per SGD step (the global batch, split across devices).
      discount: gamma.
      n_step: horizon of the n-step return ``sum_{k<n} gamma^k r_{t+k} + gamma^n Q(s_{t+n})``.
      hidden_sizes: widths of the Q network's hidden layers.
      target_update_period: SGD steps between copies of the online params to the target net.
      samples_per_insert: replay ratio, transitions trained on per transition inserted
        (``batch_size * sgd_steps / env_steps``); enforced by the table's rate limiter.
      samples_per_insert_tolerance: how far (as a fraction of ``samples_per_insert *
        min_replay_size``, in samples) the ratio may drift before one side is blocked.
      sgd_steps_per_update: SGD steps fused into one device dispatch (``lax.scan``).
      min_replay_size: transitions in replay before learning starts.
      max_replay_size: replay capacity; the oldest transitions are dropped first.
      epsilon_start / epsilon_end / epsilon_decay_steps: epsilon-greedy exploration, linear in
        env steps (counted over all envs of the actor) from start to end.
      eval_epsilon: epsilon of the evaluation policy (0: greedy).
      prioritized_replay: sample with ``P(i) ∝ |TD_i|^priority_exponent`` instead of uniformly,
        and weight the loss by ``(N P(i))^-importance_sampling_exponent`` (normalized by max).
      max_gradient_norm: global gradient-norm clip.
      huber_delta: the Huber loss switches from quadratic to linear at this |TD|.
      variable_update_period: vector steps between the actor's parameter pulls.
    """

    learning_rate: float = 2.5e-3
    batch_size: int = 64
    discount: float = 0.99
    n_step: int = 3
    hidden_sizes: tuple[int, ...] = (128, 128)
    target_update_period: int = 100
    samples_per_insert: float = 16.0
    samples_per_insert_tolerance: float = 0.1
    sgd_steps_per_update: int = 8
    min_replay_size: int = 1_000
    max_replay_size: int = 100_000
    epsilon_start: float = 1.0
    epsilon_end: float = 0.04
    epsilon_decay_steps: int = 8_000
    eval_epsilon: float = 0.0
    prioritized_replay: bool = False
    priority_exponent: float = 0.6
    importance_sampling_exponent: float = 0.4
    max_gradient_norm: float = 10.0
    huber_delta: float = 1.0
    variable_update_period: int = 1
