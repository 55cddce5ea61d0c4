"""CQL hyperparameters: DQN's (``shoal.agents.dqn.config``), the conservative weight, and the
settings of continuous CQL (SAC's: ``shoal.agents.sac.config``). Discrete defaults are tuned for
a CartPole-v1 dataset of 50k steps on a 2-core CPU (``benchmarks/offline.py``): DQN's network
(64x64), 3-step returns and target period, batches of 256, ``alpha`` 0.5 (``DISCRETE_ALPHA``,
its default for discrete actions) -- at 0.2 and below the Q-values of unseen actions ran away
within 10k SGD steps (returns fell to ~10), at 1 with a 500-step target period the greedy policy
stayed with the data's (as BC's)."""

from __future__ import annotations

import dataclasses

from shoal.agents.dqn.config import DQNConfig
from shoal.core.settings import setting

DISCRETE_ALPHA, CONTINUOUS_ALPHA = 0.5, 5.0  # (``alpha``'s default, ``None``, by the kind of action)


@dataclasses.dataclass
class CQLConfig(DQNConfig):
    """DQN's settings (the network, the n-step double-Q target, the optimizer, the target
    network) plus ``alpha``. The actor settings (epsilons, the replay ratio, ``min_replay_size``)
    do not apply: an offline agent has no actors, and replay is filled once from the dataset.

    One agent for both kinds of action (``shoal.agents.cql.builder``): a Discrete action space
    trains on DQN's loss seam, a Box on SAC's. Shared: ``alpha``, ``learning_rate`` (every
    optimizer's), ``batch_size``, ``discount``, ``n_step``, ``hidden_sizes``, ``sgd_steps_per_update``,
    ``max_replay_size``. Discrete only: ``torso``, ``target_update_period``, ``huber_delta``,
    ``max_gradient_norm``, ``optimizer`` (continuous: SAC's Adam), ``double_q``, ``prioritized_replay`` and its
    exponents, ``eval_epsilon``.
    Continuous only: ``num_sampled_actions``, ``tau``, ``initial_temperature``,
    ``target_entropy``, ``log_std_min`` / ``log_std_max`` (SAC's, ``shoal.agents.sac.config``).

    Attributes:
      alpha: the weight of the conservative term ``logsumexp_a Q(s, a) - Q(s, a_data)`` (each
        critic's, continuous: ``shoal.agents.cql.continuous_learning``); ``None``: 0.5 for
        discrete actions (above), 5.0 for continuous ones (measured on a Pendulum-v1 dataset:
        ``docs/offline-data.md``; at 0.5 the policy fell below the data's).
      max_replay_size: transitions replay holds: the whole dataset must fit (the run says so
        before it starts otherwise).
      num_sampled_actions: continuous: ``N``, the actions per state drawn from each of the
        uniform, ``pi(.|s)`` and ``pi(.|s')`` for the logsumexp (``3N`` in all).
      tau: continuous: the Polyak step of the target critics.
      initial_temperature / target_entropy: continuous: SAC's entropy temperature at the start,
        and the entropy it is tuned towards (``None``: ``-action_dimensions``).
      log_std_min / log_std_max: continuous: the policy's log standard deviation's range.
    """

    alpha: float | None = setting(None, low=0.0, high=10_000.0)
    learning_rate: float = setting(1e-3, low=0.0, low_open=True, high=1.0)
    batch_size: int = setting(256, low=1, high=1_000_000)
    n_step: int = setting(3, low=1, high=1_000)
    target_update_period: int = setting(100, low=1)
    sgd_steps_per_update: int = setting(50, low=1, high=10_000)
    min_replay_size: int = setting(1, low=1)
    max_replay_size: int = setting(1_000_000, low=1, high=1_000_000_000)
    num_sampled_actions: int = setting(10, low=1, high=1_000)
    tau: float = setting(0.005, low=0.0, low_open=True, high=1.0)
    initial_temperature: float = setting(1.0, low=0.0, low_open=True, high=1e6)
    target_entropy: float | None = setting(None, low=-1e6, high=1e6)
    log_std_min: float = setting(-5.0, low=-20.0, high=20.0)
    log_std_max: float = setting(2.0, low=-20.0, high=20.0)

    def conservative_weight(self, discrete: bool) -> float:
        """``alpha``, or its default for the kind of action (``DISCRETE_ALPHA``, ``CONTINUOUS_ALPHA``)."""
        if self.alpha is not None:
            return self.alpha
        return DISCRETE_ALPHA if discrete else CONTINUOUS_ALPHA
