"""The DQN builder: config, networks, replay, actor and learner wired together."""

from __future__ import annotations

import jax
import numpy as np

from shoal.agents.builders import AgentBuilder
from shoal.agents.dqn import learning
from shoal.agents.dqn.config import DQNConfig
from shoal.agents.dqn.networks import DQNNetworks, make_networks
from shoal.core.specs import EnvironmentSpec
from shoal.core.types import Policy
from shoal.learners import ReplicatedLearner
from shoal.replay import (NStepTransitionAdder, item_priorities, make_transition_table,
                          transition_batches, transition_items_per_batch, transition_signature,
                          update_item_priorities)

TABLE = "transitions"


class DQNBuilder(AgentBuilder):
    """Double DQN on batched n-step transitions from a rate-limited (optionally prioritized) table."""

    name = "dqn"

    def __init__(self, config: DQNConfig) -> None:
        super().__init__(config)

    def validate(self, spec: EnvironmentSpec, num_devices: int) -> None:
        c = self.config
        if spec.num_actions is None:
            raise ValueError(f"DQN needs a discrete action space; this environment's is "
                             f"{spec.action_space} (try a Discrete-action env such as CartPole-v1)")
        if c.batch_size <= 0 or c.batch_size % num_devices:
            raise ValueError(f"batch_size={c.batch_size} must be a positive multiple of the "
                             f"number of local devices ({num_devices})")
        for name in ("n_step", "sgd_steps_per_update", "target_update_period", "min_replay_size"):
            if getattr(c, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(c, name)}")
        if c.samples_per_insert <= 0:
            raise ValueError(f"samples_per_insert must be > 0, got {c.samples_per_insert}")
        if c.max_replay_size < c.min_replay_size:
            raise ValueError(f"max_replay_size={c.max_replay_size} is below "
                             f"min_replay_size={c.min_replay_size}")

    def make_networks(self, spec: EnvironmentSpec) -> DQNNetworks:
        return make_networks(spec, self.config.hidden_sizes)

    def make_policy(self, networks: DQNNetworks, spec: EnvironmentSpec, evaluation: bool) -> Policy:
        return learning.make_policy(networks.q_network, networks.num_actions, self.config, evaluation)

    def make_replay_tables(self, spec: EnvironmentSpec, policy: Policy) -> list:
        c = self.config
        return [make_transition_table(
            TABLE, transition_signature(spec, policy.extras_spec), num_envs=spec.num_envs,
            batch_size=c.batch_size, sgd_steps_per_update=c.sgd_steps_per_update,
            samples_per_insert=c.samples_per_insert,
            samples_per_insert_tolerance=c.samples_per_insert_tolerance,
            min_replay_size=c.min_replay_size, max_replay_size=c.max_replay_size,
            prioritized=c.prioritized_replay, priority_exponent=c.priority_exponent)]

    def make_dataset_iterator(self, replay_client, spec: EnvironmentSpec):
        return transition_batches(replay_client.server_address, TABLE, num_envs=spec.num_envs,
                                  batch_size=self.config.batch_size,
                                  num_steps=self.config.sgd_steps_per_update)

    def make_adder(self, replay_client, spec: EnvironmentSpec, policy: Policy) -> NStepTransitionAdder:
        return NStepTransitionAdder(replay_client, TABLE, spec, self.config.n_step, self.config.discount)

    def make_learner(self, key, networks: DQNNetworks, dataset, logger=None, counter=None,
                     replay_client=None) -> ReplicatedLearner:
        c = self.config
        state = learning.init_state(key, networks.q_network, networks.observation_shape, c)
        after_update = None
        if c.prioritized_replay:
            if replay_client is None:
                raise ValueError("prioritized replay needs a replay client to write priorities")
            items_per_batch = transition_items_per_batch(c.batch_size, dataset.num_envs)

            def after_update(sample, td_abs):
                td = np.asarray(jax.device_get(td_abs))  # [devices, steps, batch / devices]
                td = np.swapaxes(td, 0, 1).reshape(td.shape[1], -1)  # [steps, batch], sampling order
                priorities = item_priorities(td, items_per_batch, dataset.num_envs)
                update_item_priorities(replay_client, TABLE, sample.keys, priorities)

        return ReplicatedLearner(state, learning.make_update(networks.q_network, c), dataset,
                                 after_update=after_update, counter=counter, logger=logger)
