"""The R2D2 builder: env sequences with the actor's LSTM state into a prioritized, rate-limited
Reverb table; a recurrent double-Q learner that writes the sequences' priorities back."""

from __future__ import annotations

import jax
import numpy as np

from shoal.agents.builders import AgentBuilder, ExtrasSpec, extras_of
from shoal.agents.components.torsos import check_torso
from shoal.agents.r2d2 import learning
from shoal.agents.r2d2.config import R2D2Config
from shoal.agents.r2d2.networks import R2D2Networks, make_networks
from shoal.agents.r2d2.presets import PRESETS
from shoal.core.counting import Counter
from shoal.core.interfaces import Adder, Dataset
from shoal.core.loggers import Logger
from shoal.core.specs import EnvironmentSpec
from shoal.core.timing import Stopwatch
from shoal.core.types import Policy, Sample
from shoal.learners import ReplicatedLearner
from shoal.replay import (
    EnvSequenceAdder,
    env_sequence_batches,
    env_sequence_signature,
    make_sequence_table,
    update_item_priorities,
)
from shoal.replay.contract import ReplayClient
from shoal.replay.layouts import env_sequence_example

TABLE = "sequences"


class R2D2Builder(AgentBuilder):
    """R2D2: recurrent replay distributed DQN (Kapturowski et al., 2019)."""

    name = "r2d2"
    presets = PRESETS  # (as a plug-in declares its own)

    config: R2D2Config
    # The loss seam: ``learning.Loss``, a plain function ``(networks, params, target_params, batch,
    # rng, config) -> learning.LossOutput``. An R2D2 variant sets its own (and subclasses the
    # config); the state, optimizer, target network, priorities, update step and sharding stay R2D2's.
    loss = staticmethod(learning.r2d2_loss)

    def __init__(self, config: R2D2Config) -> None:
        super().__init__(config)

    def validate(self, spec: EnvironmentSpec, num_devices: int) -> None:
        c = self.config
        if spec.num_actions is None:
            raise ValueError(f"R2D2 needs a discrete action space; this environment's is {spec.action_space}")
        check_torso(c.torso, spec=spec)
        super().validate(spec, num_devices)
        if c.batch_size % num_devices:
            raise ValueError(
                f"batch_size={c.batch_size} must be a multiple of the number of local devices ({num_devices})"
            )
        if c.sequence_period > c.sequence_length:
            raise ValueError(
                f"sequence_period={c.sequence_period} exceeds the sequence length burn_in_length + "
                f"trace_length = {c.sequence_length}: steps between sequences would never be replayed"
            )
        if c.max_replay_size < c.min_replay_size:
            raise ValueError(f"max_replay_size={c.max_replay_size} is below min_replay_size={c.min_replay_size}")

    def env_steps_before_learning(self, spec: EnvironmentSpec) -> int:
        """The first full sequence, then one per env every ``sequence_period`` vector steps."""
        c = self.config
        periods = -(-c.min_replay_size // spec.num_envs) - 1
        return (c.sequence_length + periods * c.sequence_period) * spec.num_envs

    def make_networks(self, spec: EnvironmentSpec) -> R2D2Networks:
        c = self.config
        return make_networks(spec, c.hidden_sizes, c.lstm_size, c.head_size, c.torso)

    def make_policy(self, networks: R2D2Networks, spec: EnvironmentSpec, evaluation: bool) -> Policy:
        return learning.make_policy(networks, self.config, evaluation)

    def extras_spec(self, spec: EnvironmentSpec) -> ExtrasSpec:
        return learning.extras_spec(self.config)

    def make_replay_tables(self, spec: EnvironmentSpec, extras: ExtrasSpec | None = None) -> list:
        c = self.config
        signature = env_sequence_signature(spec, extras_of(extras, self, spec), c.sequence_length)
        return [
            make_sequence_table(
                TABLE,
                signature,
                batch_size=c.batch_size,
                samples_per_insert=c.samples_per_insert,
                samples_per_insert_tolerance=c.samples_per_insert_tolerance,
                min_replay_size=c.min_replay_size,
                max_replay_size=c.max_replay_size,
                priority_exponent=c.priority_exponent,
            )
        ]

    def make_dataset_iterator(self, replay_client: ReplayClient, spec: EnvironmentSpec) -> Dataset:
        return env_sequence_batches(replay_client, TABLE, batch_size=self.config.batch_size)

    def example_batch(self, spec: EnvironmentSpec, extras: ExtrasSpec | None = None) -> Sample:
        c = self.config
        return env_sequence_example(spec, extras_of(extras, self, spec), c.batch_size, c.sequence_length)

    def make_adder(
        self,
        replay_client: ReplayClient,
        spec: EnvironmentSpec,
        extras: ExtrasSpec | None = None,
    ) -> Adder:

        c = self.config
        return EnvSequenceAdder(replay_client, TABLE, spec, c.sequence_length, c.sequence_period)

    def init_state(self, key: jax.Array, networks: R2D2Networks) -> learning.TrainingState:
        return learning.init_state(key, networks, self.config)

    def make_learner(
        self,
        key: jax.Array,
        networks: R2D2Networks,
        dataset: Dataset,
        logger: Logger | None = None,
        counter: Counter | None = None,
        replay_client: ReplayClient | None = None,
        stopwatch: Stopwatch | None = None,
    ) -> ReplicatedLearner:
        """The learner; after each update it writes every sampled sequence's new priority."""
        if replay_client is None:
            raise ValueError("R2D2 needs a replay client to write priorities")

        def after_update(sample: Sample, priorities: jax.Array) -> None:  # (on the learner's hook thread)
            update_item_priorities(replay_client, TABLE, np.asarray(sample.keys), np.asarray(priorities) + 1e-6)

        state = self.init_state(key, networks)
        return ReplicatedLearner(
            state,
            learning.make_update(networks, self.config, self.loss, key),
            dataset,
            after_update=after_update,
            counter=counter,
            logger=logger,
            stopwatch=stopwatch,
        )
