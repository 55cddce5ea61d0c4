"""Behaviour cloning hyperparameters. Defaults are tuned for a CartPole-v1 dataset on a 2-core CPU."""

from __future__ import annotations

import dataclasses

from shoal.core.settings import setting


@dataclasses.dataclass
class BCConfig:
    """BC settings. Replay holds the dataset's single transitions (filled once by ``--dataset``).

    Attributes:
      learning_rate: Adam step size.
      batch_size: transitions per SGD step (the global batch, split across devices).
      hidden_sizes: widths of the policy network's hidden layers.
      torso: for image observations: the convolutional torso (as DQN's ``torso``).
      sgd_steps_per_update: SGD steps fused into one device dispatch (``lax.scan``).
      max_replay_size: transitions replay holds: the whole dataset must fit.
      max_gradient_norm: global gradient-norm clip.
      variable_update_period: vector steps between the evaluator's parameter pulls.
    """

    learning_rate: float = setting(1e-3, low=0.0, low_open=True, high=1.0)
    batch_size: int = setting(256, low=1, high=1_000_000)
    hidden_sizes: tuple[int, ...] = setting((256, 256), low=1, high=65_536, items=True)
    torso: str = "auto"
    sgd_steps_per_update: int = setting(50, low=1, high=10_000)
    max_replay_size: int = setting(1_000_000, low=1, high=1_000_000_000)
    max_gradient_norm: float = setting(10.0, low=0.0, low_open=True)
    variable_update_period: int = setting(1, low=1, high=1_000_000)
