"""DQN hyperparameters. Defaults are tuned for CartPole-v1 on a 2-core CPU."""

from __future__ import annotations

import dataclasses

from shoal.core.settings import setting


@dataclasses.dataclass
class DQNConfig:
    """DQN settings (each checked against its range before a run starts). Replay sizes count
    transitions (env steps), not Reverb items.

    Attributes:
      learning_rate: the optimizer's step size.
      optimizer: ``adam`` (the default) or ``rmsprop``: the MinAtar and Nature DQNs' centred
        RMSProp (squared-gradient decay 0.95, epsilon 0.01 added outside the square root, as
        PyTorch's ``RMSprop(alpha=0.95, eps=0.01, centered=True)`` in MinAtar's ``examples/dqn.py``).
      batch_size: transitions per SGD step (the global batch, split across devices).
      discount: gamma.
      double_q: the double-Q target (the default): the online net picks ``s'``'s action, the
        target net values it. ``False``: ``max_a' Q(s', a'; target)``, the Nature and MinAtar
        papers' DQN target.
      n_step: horizon of the n-step return ``sum_{k<n} gamma^k r_{t+k} + gamma^n Q(s_{t+n})``.
      hidden_sizes: widths of the Q network's hidden layers.
      torso: for image observations (rank-3 uint8 frames): the convolutional torso, ``nature``
        (the Nature DQN network), ``impala`` (the IMPALA ResNet), ``minatar`` (MinAtar's one
        convolution and dense 128) or ``auto`` (``nature`` for frames of 36x36 or more, else
        ``minatar``); ``hidden_sizes`` then do not apply. ``mlp``: none, the frames flattened
        into the MLP of ``hidden_sizes``. A convolutional torso named for observations that
        are not frames is one line (``torso=auto`` reads them with the MLP).
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

    learning_rate: float = setting(4e-3, low=0.0, low_open=True, high=1.0)
    optimizer: str = "adam"
    batch_size: int = setting(64, low=1, high=1_000_000)
    discount: float = setting(0.99, low=0.0, high=1.0)
    double_q: bool = True
    n_step: int = setting(3, low=1, high=1_000)
    hidden_sizes: tuple[int, ...] = setting((64, 64), low=1, high=65_536, items=True)
    torso: str = "auto"
    target_update_period: int = setting(100, low=1)
    samples_per_insert: float = setting(32.0, low=0.0, low_open=True, high=10_000.0)
    samples_per_insert_tolerance: float = setting(0.1, low=0.0, low_open=True, high=1_000.0)
    sgd_steps_per_update: int = setting(8, low=1, high=10_000)
    min_replay_size: int = setting(1_000, low=1)
    max_replay_size: int = setting(100_000, low=1, high=1_000_000_000)
    epsilon_start: float = setting(1.0, low=0.0, high=1.0)
    epsilon_end: float = setting(0.04, low=0.0, high=1.0)
    epsilon_decay_steps: int = setting(8_000, low=1)
    eval_epsilon: float = setting(0.0, low=0.0, high=1.0)
    prioritized_replay: bool = False
    priority_exponent: float = setting(0.6, low=0.0, high=10.0)
    importance_sampling_exponent: float = setting(0.4, low=0.0, high=1.0)
    max_gradient_norm: float = setting(10.0, low=0.0, low_open=True)
    huber_delta: float = setting(1.0, low=0.0, low_open=True)
    variable_update_period: int = setting(1, low=1, high=1_000_000)


OPTIMIZERS = ("adam", "rmsprop")


def check_optimizer(config: DQNConfig) -> None:
    """Raises ``ValueError`` (one line) for an optimizer DQN does not have."""
    if config.optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {', '.join(OPTIMIZERS)}, got {config.optimizer!r}")
