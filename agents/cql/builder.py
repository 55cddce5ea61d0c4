"""The discrete CQL builder: DQN's builder with CQL's loss (DQN's loss seam, ``builder.loss``)
and replay that a dataset fills once (``shoal.agents.offline_replay``)."""

from __future__ import annotations

from typing import Any, ClassVar

import optax

from shoal.agents.builders import ExtrasSpec
from shoal.agents.cql.config import CQLConfig
from shoal.agents.cql.learning import cql_loss
from shoal.agents.cql.presets import PRESETS
from shoal.agents.dqn.builder import DQNBuilder
from shoal.agents.dqn.learning import LossOutput
from shoal.agents.offline_replay import offline_tables
from shoal.core.specs import EnvironmentSpec
from shoal.core.types import Batch


class CQLBuilder(DQNBuilder):
    """Discrete CQL: trained offline on a dataset's n-step transitions (``shoal train --agent cql
    --dataset PATH``), evaluated greedily on the env."""

    name = "cql"
    offline: ClassVar[bool] = True  # no actors: replay is filled once from --dataset
    presets = PRESETS

    config: CQLConfig

    def __init__(self, config: CQLConfig) -> None:
        super().__init__(config)

    def env_steps_before_learning(self, spec: EnvironmentSpec) -> int:
        return 0  # (no env steps: the dataset is in replay before the first update)

    def make_replay_tables(self, spec: EnvironmentSpec, extras: ExtrasSpec | None = None) -> list:
        return offline_tables(super().make_replay_tables(spec, extras))

    def loss(self, network: Any, params: optax.Params, target_params: optax.Params, batch: Batch) -> LossOutput:
        """CQL's loss (``shoal.agents.cql.learning``)."""
        return cql_loss(network, params, target_params, batch, self.config.huber_delta, self.config.alpha)
