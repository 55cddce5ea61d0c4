"""The DQN builder: wires config, networks, replay, actor and learner together."""

from __future__ import annotations

import math

import jax
import numpy as np

from shoal.actors.actor import BatchedActor
from shoal.actors.variable_client import VariableClient
from shoal.agents.dqn import learning
from shoal.agents.dqn.config import DQNConfig
from shoal.agents.dqn.networks import DQNNetworks, make_networks
from shoal.core.specs import EnvironmentSpec
from shoal.learners.sgd import SGDLearner
from shoal.replay import (NStepTransitionAdder, ShardedPrefetchIterator, make_transition_table,
                          rate_limited_sample_budget)
from shoal.replay.priorities import item_priorities, update_item_priorities

TABLE = "transitions"


class DQNBuilder:
    """Builds DQN's parts. Replay items hold one vector step of ``spec.num_envs`` transitions,
    so the config's transition counts are converted to items here."""

    def __init__(self, config: DQNConfig) -> None:
        self.config = config
        self._num_envs: int | None = None

    # -- checks and sizes ------------------------------------------------------------------
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

    def _items(self, transitions: int) -> int:
        return max(1, math.ceil(transitions / self._num_envs))

    @property
    def items_per_batch(self) -> int:
        return math.ceil(self.config.batch_size / self._num_envs)

    @property
    def item_samples_per_insert(self) -> float:
        """The rate limiter's ratio in items: ``samples_per_insert`` scaled by items sampled
        per transition trained on (a partly used last item still counts as sampled)."""
        c = self.config
        return c.samples_per_insert * self.items_per_batch * self._num_envs / c.batch_size

    def updates_allowed(self, items_inserted: int) -> int:
        """Learner updates a single-process run may have done after ``items_inserted`` inserts."""
        budget = rate_limited_sample_budget(items_inserted, min_size=self._items(self.config.min_replay_size),
                                            samples_per_insert=self.item_samples_per_insert)
        return int(budget // (self.items_per_batch * self.config.sgd_steps_per_update))

    # -- the six factories -----------------------------------------------------------------
    def make_networks(self, spec: EnvironmentSpec) -> DQNNetworks:
        return make_networks(spec, self.config.hidden_sizes)

    def make_replay_tables(self, spec: EnvironmentSpec, policy=None) -> list:
        c = self.config
        self._num_envs = spec.num_envs
        spi = self.item_samples_per_insert
        one_update = self.items_per_batch * c.sgd_steps_per_update
        error_buffer = max(2 * one_update + 2 * spi,
                           c.samples_per_insert_tolerance * spi * self._items(c.min_replay_size))
        return [make_transition_table(
            TABLE, spec, spec.num_envs, max_size=self._items(c.max_replay_size),
            min_size=self._items(c.min_replay_size), samples_per_insert=spi,
            error_buffer=error_buffer, prioritized=c.prioritized_replay,
            priority_exponent=c.priority_exponent)]

    def make_dataset_iterator(self, replay_client) -> ShardedPrefetchIterator:
        iterator = ShardedPrefetchIterator(
            replay_client.server_address, TABLE, batch_size=self.config.batch_size,
            steps_per_update=self.config.sgd_steps_per_update)
        self._num_envs = iterator.num_envs
        return iterator

    def make_adder(self, replay_client, spec: EnvironmentSpec, policy=None) -> NStepTransitionAdder:
        return NStepTransitionAdder(replay_client, TABLE, self.config.n_step, self.config.discount,
                                    observation_dtype=spec.observation_dtype,
                                    action_dtype=spec.action_dtype)

    def make_policy(self, networks: DQNNetworks, spec: EnvironmentSpec, evaluation: bool):
        return learning.make_policy(networks.q_network, networks.num_actions, self.config, evaluation)

    def make_actor(self, key, policy, spec: EnvironmentSpec, variable_source, adder=None,
                   asynchronous_updates: bool = True) -> BatchedActor:
        client = VariableClient(variable_source, self.config.variable_update_period,
                                asynchronous=asynchronous_updates)
        return BatchedActor(policy, key, client, adder, num_envs_per_step=spec.num_envs)

    def make_learner(self, key, networks: DQNNetworks, dataset, logger=None, counter=None,
                     replay_client=None) -> SGDLearner:
        state = learning.init_state(key, networks.q_network, networks.observation_shape, self.config)
        after_update = None
        if self.config.prioritized_replay:
            if replay_client is None:
                raise ValueError("prioritized replay needs a replay client to write priorities")

            def after_update(sample, metrics):
                td = np.swapaxes(np.asarray(jax.device_get(metrics["td_abs"])), 0, 1)  # [steps, nd, b]
                td = td.reshape(td.shape[0], -1)  # [steps, batch], in sampling order
                priorities = item_priorities(td, dataset.items_per_batch, dataset.num_envs)
                update_item_priorities(replay_client, TABLE, sample.keys, priorities)

        return SGDLearner(state, learning.make_sgd_step(networks.q_network, self.config), dataset,
                          devices=dataset.devices, after_update=after_update, counter=counter,
                          logger=logger)
