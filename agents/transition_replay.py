"""``TransitionReplayBuilder``: the replay half of agents that learn from n-step transitions
under a replay ratio (DQN, SAC). The table samples uniformly, or by priority where the agent
says so (``priority_exponent``). Its config is a ``TransitionReplayConfig``.
"""

from __future__ import annotations

from typing import Protocol

from shoal.agents.builders import AgentBuilder, AgentConfig, ExtrasSpec, extras_of
from shoal.core.interfaces import Adder, Dataset
from shoal.core.specs import EnvironmentSpec
from shoal.core.types import Sample
from shoal.replay import NStepTransitionAdder, make_transition_table, transition_batches, transition_signature
from shoal.replay.contract import ReplayClient
from shoal.replay.layouts import transition_example

TABLE = "transitions"


class TransitionReplayConfig(AgentConfig, Protocol):
    """The fields of a config that this builder reads (DQN's and SAC's configs have them)."""

    batch_size: int  # transitions per SGD step
    sgd_steps_per_update: int  # SGD steps fused into one update
    samples_per_insert: float  # the replay ratio the table's rate limiter enforces
    samples_per_insert_tolerance: float
    min_replay_size: int  # transitions in replay before learning starts
    max_replay_size: int
    n_step: int  # the adder's n-step horizon
    discount: float


class TransitionReplayBuilder(AgentBuilder):
    config: TransitionReplayConfig

    def validate(self, spec: EnvironmentSpec, num_devices: int) -> None:
        super().validate(spec, num_devices)
        c = self.config
        if c.batch_size % num_devices:
            raise ValueError(
                f"batch_size={c.batch_size} must be a positive multiple of the number of local devices ({num_devices})"
            )
        if c.max_replay_size < c.min_replay_size:
            raise ValueError(f"max_replay_size={c.max_replay_size} is below min_replay_size={c.min_replay_size}")

    def env_steps_before_learning(self, spec: EnvironmentSpec) -> int:
        return self.config.min_replay_size + (self.config.n_step - 1) * spec.num_envs

    def priority_exponent(self) -> float | None:
        """``alpha`` of prioritized sampling, ``P(i) ∝ priority_i ** alpha``; ``None``: uniform."""
        return None

    def extras_spec(self, spec: EnvironmentSpec) -> ExtrasSpec:
        """Transitions hold no extras (DQN's and SAC's policies record none)."""
        return {}

    def make_replay_tables(self, spec: EnvironmentSpec, extras: ExtrasSpec | None = None) -> list:
        c = self.config
        return [
            make_transition_table(
                TABLE,
                transition_signature(spec, extras_of(extras, self, spec)),
                num_envs=spec.num_envs,
                batch_size=c.batch_size,
                sgd_steps_per_update=c.sgd_steps_per_update,
                samples_per_insert=c.samples_per_insert,
                samples_per_insert_tolerance=c.samples_per_insert_tolerance,
                min_replay_size=c.min_replay_size,
                max_replay_size=c.max_replay_size,
                priority_exponent=self.priority_exponent(),
            )
        ]

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

    def make_adder(
        self,
        replay_client: ReplayClient,
        spec: EnvironmentSpec,
        extras: ExtrasSpec | None = None,
    ) -> Adder:

        return NStepTransitionAdder(replay_client, TABLE, spec, self.config.n_step, self.config.discount)
