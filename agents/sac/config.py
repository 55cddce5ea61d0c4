"""SAC hyperparameters. Defaults are tuned for Pendulum-v1 on a 2-core CPU."""

from __future__ import annotations

import dataclasses

from shoal.core.settings import setting


@dataclasses.dataclass
class SACConfig:
    """Soft actor-critic settings. Replay sizes count transitions (env steps), not Reverb items.

    Attributes:
      learning_rate: Adam step size of the policy, the critics and the temperature.
      batch_size: transitions per SGD step (the global batch, split across devices).
      discount: gamma.
      n_step: horizon of the n-step return the critics bootstrap from (see
        ``shoal.replay.adders``; the entropy bonus enters at the bootstrap state).
      tau: Polyak step of the target critics, ``target <- tau * online + (1 - tau) * target``.
      hidden_sizes: widths of the policy's and of each critic's hidden layers (64 x 64 suffices for
        Pendulum; MuJoCo tasks such as HalfCheetah want 256 x 256).
      initial_temperature: the entropy temperature alpha at the start.
      target_entropy: the entropy alpha is tuned towards; ``None``: ``-action_dimensions``.
      samples_per_insert: replay ratio, transitions trained on per transition inserted.
      samples_per_insert_tolerance: how far (as a fraction of ``samples_per_insert *
        min_replay_size`` samples) the ratio may drift before one side waits.
      sgd_steps_per_update: SGD steps fused into one device dispatch (``lax.scan``).
      min_replay_size / max_replay_size: transitions in replay before learning starts / at most.
      log_std_min / log_std_max: the policy's log standard deviation is squashed into this range.
      variable_update_period: vector steps between an actor's parameter pulls.
    """

    learning_rate: float = setting(1e-3, low=0.0, low_open=True, high=1.0)
    batch_size: int = setting(256, low=1, high=1_000_000)
    discount: float = setting(0.99, low=0.0, high=1.0)
    n_step: int = setting(1, low=1, high=1_000)
    tau: float = setting(0.005, low=0.0, low_open=True, high=1.0)
    hidden_sizes: tuple[int, ...] = setting((64, 64), low=1, high=65_536, items=True)
    initial_temperature: float = setting(1.0, low=0.0, low_open=True, high=1e6)
    target_entropy: float | None = setting(None, low=-1e6, high=1e6)
    samples_per_insert: float = setting(256.0, low=0.0, low_open=True, high=10_000.0)
    samples_per_insert_tolerance: float = setting(0.1, low=0.0, low_open=True, high=1_000.0)
    sgd_steps_per_update: int = setting(16, low=1, high=10_000)
    min_replay_size: int = setting(1_000, low=1)
    max_replay_size: int = setting(1_000_000, low=1, high=1_000_000_000)
    log_std_min: float = setting(-5.0, low=-20.0, high=20.0)
    log_std_max: float = setting(2.0, low=-20.0, high=20.0)
    variable_update_period: int = setting(1, low=1, high=1_000_000)
