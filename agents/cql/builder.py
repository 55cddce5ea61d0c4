"""The CQL builder, one agent for both kinds of action, picked by the env's action space:

* **discrete** -- DQN's builder with CQL's loss (DQN's loss seam, ``builder.loss``:
  ``shoal.agents.cql.learning``);
* **continuous** (a bounded 1-d Box) -- SAC's networks, update and greedy policy (its squashed
  mean) with CQL's loss on SAC's seam (``make_update(networks, config, loss)``:
  ``shoal.agents.cql.continuous_learning``).

Both train on the dataset's n-step transitions in replay that the dataset fills once
(``shoal.agents.offline_replay``). The factories that take the env spec pick by
``spec.num_actions``; those that take networks by their kind (``SACNetworks``: continuous).
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, cast

import jax
import optax

from shoal.agents.builders import ExtrasSpec
from shoal.agents.cql.config import CQLConfig
from shoal.agents.cql.continuous_learning import cql_sac_loss
from shoal.agents.cql.learning import cql_loss
from shoal.agents.cql.presets import PRESETS
from shoal.agents.dqn.builder import DQNBuilder
from shoal.agents.dqn.learning import LossOutput
from shoal.agents.dqn.networks import DQNNetworks
from shoal.agents.offline_replay import offline_tables
from shoal.agents.sac import learning as sac_learning
from shoal.agents.sac.networks import SACNetworks, check_action_space
from shoal.agents.sac.networks import make_networks as make_sac_networks
from shoal.agents.transition_replay import TransitionReplayBuilder
from shoal.core.counting import Counter
from shoal.core.interfaces import Dataset
from shoal.core.loggers import Logger
from shoal.core.specs import EnvironmentSpec
from shoal.core.timing import Stopwatch
from shoal.core.types import Batch, Policy
from shoal.learners import ReplicatedLearner
from shoal.replay.contract import ReplayClient


class CQLBuilder(DQNBuilder):
    """CQL: trained offline on a dataset's n-step transitions (``shoal train --agent cql
    --dataset PATH``), evaluated greedily on the env; discrete actions on DQN's loss seam,
    continuous ones on SAC's (module docstring)."""

    name = "cql"
    offline: ClassVar[bool] = True  # no actors: replay is filled once from --dataset
    presets = PRESETS

    config: CQLConfig

    def __init__(self, config: CQLConfig) -> None:
        super().__init__(config)

    def validate(self, spec: EnvironmentSpec, num_devices: int) -> None:
        if spec.num_actions is not None:
            super().validate(spec, num_devices)  # (DQN's)
            return
        check_action_space(spec)  # (SAC's: a 1-d Box with finite bounds)
        if spec.action_mask is not None:
            raise ValueError("cql does not read an action_mask of continuous actions (as sac)")
        c = self.config
        if c.prioritized_replay:
            raise ValueError(
                "prioritized_replay applies to discrete cql (DQN's TD errors); continuous cql samples uniformly"
            )
        if c.optimizer != "adam":
            raise ValueError(
                f"optimizer={c.optimizer} applies to discrete cql (DQN's); continuous cql trains with SAC's Adam"
            )
        if not c.double_q:
            raise ValueError(
                f"double_q={c.double_q!r} applies to discrete cql (DQN's target); continuous cql has SAC's twin critics"
            )
        TransitionReplayBuilder.validate(self, spec, num_devices)  # (the settings' ranges, the batch, replay)
        if c.log_std_min >= c.log_std_max:
            raise ValueError(f"log_std_min={c.log_std_min} must be below log_std_max={c.log_std_max}")

    def env_steps_before_learning(self, spec: EnvironmentSpec) -> int:
        return 0  # (no env steps: the dataset is in replay before the first update)

    def make_replay_tables(self, spec: EnvironmentSpec, extras: ExtrasSpec | None = None) -> list:
        return offline_tables(super().make_replay_tables(spec, extras))

    def make_networks(self, spec: EnvironmentSpec) -> DQNNetworks | SACNetworks:  # type: ignore[override]
        if spec.num_actions is not None:
            return super().make_networks(spec)
        c = self.config
        return make_sac_networks(spec, c.hidden_sizes, c.log_std_min, c.log_std_max)

    def make_policy(self, networks: DQNNetworks | SACNetworks, spec: EnvironmentSpec, evaluation: bool) -> Policy:
        if isinstance(networks, SACNetworks):
            return sac_learning.make_policy(networks, evaluation)  # (evaluation: the squashed mean)
        return super().make_policy(networks, spec, evaluation)

    def init_state(self, key: jax.Array, networks: DQNNetworks | SACNetworks) -> Any:
        if isinstance(networks, SACNetworks):
            return sac_learning.init_state(key, networks, cast(Any, self.config))  # (SAC's fields: the config has them)
        return super().init_state(key, networks)

    def loss(self, network: Any, params: optax.Params, target_params: optax.Params, batch: Batch) -> LossOutput:
        """Discrete CQL's loss (``shoal.agents.cql.learning``), on DQN's seam."""
        c = self.config
        return cql_loss(
            network, params, target_params, batch, c.huber_delta, c.conservative_weight(discrete=True), c.double_q
        )

    def _continuous_config(self) -> CQLConfig:
        """The config continuous CQL's loss reads: ``alpha`` resolved (``None``: its default)."""
        return dataclasses.replace(self.config, alpha=self.config.conservative_weight(discrete=False))

    def make_learner(
        self,
        key: jax.Array,
        networks: DQNNetworks | SACNetworks,
        dataset: Dataset,
        logger: Logger | None = None,
        counter: Counter | None = None,
        replay_client: ReplayClient | None = None,
        stopwatch: Stopwatch | None = None,
    ) -> ReplicatedLearner:
        if not isinstance(networks, SACNetworks):
            return super().make_learner(key, networks, dataset, logger, counter, replay_client, stopwatch)
        return ReplicatedLearner(
            self.init_state(key, networks),
            sac_learning.make_update(networks, cast(Any, self._continuous_config()), cql_sac_loss),  # (SAC's seam)
            dataset,
            counter=counter,
            logger=logger,
            stopwatch=stopwatch,
        )
