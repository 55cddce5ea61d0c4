"""The BC builder: a policy network regressed onto a dataset's actions, from replay that the
dataset fills once (``shoal.agents.offline_replay``)."""

from __future__ import annotations

from typing import ClassVar

import jax

from shoal.agents.bc import learning
from shoal.agents.bc.config import BCConfig
from shoal.agents.bc.networks import BCNetworks, make_bc_networks
from shoal.agents.bc.presets import PRESETS
from shoal.agents.builders import AgentBuilder, ExtrasSpec, extras_of
from shoal.agents.components.torsos import check_torso
from shoal.agents.offline_replay import offline_tables
from shoal.agents.transition_replay import TABLE
from shoal.core.counting import Counter
from shoal.core.interfaces import Adder, Dataset
from shoal.core.loggers import Logger
from shoal.core.specs import EnvironmentSpec
from shoal.core.timing import Stopwatch
from shoal.core.types import Policy, Sample
from shoal.learners import ReplicatedLearner
from shoal.learners.updates import UpdateFn
from shoal.replay import NStepTransitionAdder, make_transition_table, transition_batches, transition_signature
from shoal.replay.contract import ReplayClient
from shoal.replay.layouts import transition_example


class BCBuilder(AgentBuilder):
    """Behaviour cloning (discrete: cross-entropy; continuous: mean-squared error) on a
    dataset's single transitions (``shoal train --agent bc --dataset PATH``)."""

    name = "bc"
    offline: ClassVar[bool] = True  # no actors: replay is filled once from --dataset
    presets = PRESETS

    config: BCConfig

    def __init__(self, config: BCConfig) -> None:
        super().__init__(config)

    def validate(self, spec: EnvironmentSpec, num_devices: int) -> None:
        super().validate(spec, num_devices)
        check_torso(self.config.torso, spec=spec)
        if self.config.batch_size % num_devices:
            raise ValueError(
                f"batch_size={self.config.batch_size} must be a positive multiple of the number of local "
                f"devices ({num_devices})"
            )

    def env_steps_before_learning(self, spec: EnvironmentSpec) -> int:
        return 0  # (no env steps: the dataset is in replay before the first update)

    def extras_spec(self, spec: EnvironmentSpec) -> ExtrasSpec:
        return {}  # (single transitions: what the dataset holds, nothing more)

    def make_replay_tables(self, spec: EnvironmentSpec, extras: ExtrasSpec | None = None) -> list:
        c = self.config
        table = make_transition_table(
            TABLE,
            transition_signature(spec, extras_of(extras, self, spec)),
            num_envs=spec.num_envs,
            batch_size=c.batch_size,
            sgd_steps_per_update=c.sgd_steps_per_update,
            samples_per_insert=1.0,  # (replaced: sampled freely once filled)
            samples_per_insert_tolerance=1.0,
            min_replay_size=1,
            max_replay_size=c.max_replay_size,
        )
        return offline_tables([table])

    def make_dataset_iterator(self, replay_client: ReplayClient, spec: EnvironmentSpec) -> Dataset:
        return transition_batches(
            replay_client,
            TABLE,
            num_envs=spec.num_envs,
            batch_size=self.config.batch_size,
            num_steps=self.config.sgd_steps_per_update,
        )

    def example_batch(self, spec: EnvironmentSpec, extras: ExtrasSpec | None = None) -> Sample:
        return transition_example(
            spec, extras_of(extras, self, spec), self.config.batch_size, self.config.sgd_steps_per_update
        )

    def make_adder(self, replay_client: ReplayClient, spec: EnvironmentSpec, extras: ExtrasSpec | None = None) -> Adder:
        return NStepTransitionAdder(replay_client, TABLE, spec, 1, 1.0)  # single transitions

    def make_networks(self, spec: EnvironmentSpec) -> BCNetworks:
        return make_bc_networks(spec, self.config.hidden_sizes, self.config.torso)

    def make_policy(self, networks: BCNetworks, spec: EnvironmentSpec, evaluation: bool) -> Policy:
        return learning.make_policy(networks)

    def init_state(self, key: jax.Array, networks: BCNetworks) -> learning.TrainingState:
        return learning.init_state(key, networks, self.config)

    def make_update(self, networks: BCNetworks) -> UpdateFn:
        """The learner's update (a subclass with its own losses, as iql, returns its own)."""
        return learning.make_update(networks, self.config)

    def make_learner(
        self,
        key: jax.Array,
        networks: BCNetworks,
        dataset: Dataset,
        logger: Logger | None = None,
        counter: Counter | None = None,
        replay_client: ReplayClient | None = None,
        stopwatch: Stopwatch | None = None,
    ) -> ReplicatedLearner:
        return ReplicatedLearner(
            self.init_state(key, networks),
            self.make_update(networks),
            dataset,
            counter=counter,
            logger=logger,
            stopwatch=stopwatch,
        )
