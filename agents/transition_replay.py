"""``TransitionReplayBuilder``: the replay half of agents that learn from n-step transitions
under a replay ratio (DQN, SAC).

Its config has ``batch_size``, ``sgd_steps_per_update``, ``samples_per_insert``,
``samples_per_insert_tolerance``, ``min_replay_size``, ``max_replay_size``, ``n_step`` and
``discount``. The table samples uniformly, or by priority where the agent says so
(``priority_exponent``).
"""

from __future__ import annotations

from shoal.agents.builders import AgentBuilder
from shoal.core.specs import EnvironmentSpec
from shoal.core.types import Policy

TABLE = "transitions"


class TransitionReplayBuilder(AgentBuilder):
    def validate(self, spec: EnvironmentSpec, num_devices: int) -> None:
        super().validate(spec, num_devices)
        c = self.config
        if c.batch_size % num_devices:
            raise ValueError(f"batch_size={c.batch_size} must be a positive multiple of the "
                             f"number of local devices ({num_devices})")
        if c.max_replay_size < c.min_replay_size:
            raise ValueError(f"max_replay_size={c.max_replay_size} is below "
                             f"min_replay_size={c.min_replay_size}")

    def env_steps_before_learning(self, spec: EnvironmentSpec) -> int:
        return self.config.min_replay_size + (self.config.n_step - 1) * spec.num_envs

    def priority_exponent(self) -> float | None:
        """``alpha`` of prioritized sampling, ``P(i) ∝ priority_i ** alpha``; ``None``: uniform."""
        return None

    def make_replay_tables(self, spec: EnvironmentSpec, policy: Policy) -> list:
        from shoal.replay import make_transition_table, transition_signature

        c = self.config
        return [make_transition_table(
            TABLE, transition_signature(spec, policy.extras_spec), num_envs=spec.num_envs,
            batch_size=c.batch_size, sgd_steps_per_update=c.sgd_steps_per_update,
            samples_per_insert=c.samples_per_insert,
            samples_per_insert_tolerance=c.samples_per_insert_tolerance,
            min_replay_size=c.min_replay_size, max_replay_size=c.max_replay_size,
            priority_exponent=self.priority_exponent())]

    def make_dataset_iterator(self, replay_client, spec: EnvironmentSpec):
        from shoal.replay import transition_batches

        return transition_batches(replay_client.server_address, TABLE, num_envs=spec.num_envs,
                                  batch_size=self.config.batch_size,
                                  num_steps=self.config.sgd_steps_per_update)

    def example_batch(self, spec: EnvironmentSpec, policy: Policy):
        from shoal.replay.layouts import transition_example

        return transition_example(spec, policy.extras_spec, self.config.batch_size,
                                  self.config.sgd_steps_per_update)

    def make_adder(self, replay_client, spec: EnvironmentSpec, policy: Policy):
        from shoal.replay import NStepTransitionAdder

        return NStepTransitionAdder(replay_client, TABLE, spec, self.config.n_step, self.config.discount)
