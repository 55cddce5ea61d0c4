"""The DQN builder: config, networks, replay, actor and learner wired together."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
import optax

from shoal.agents.components.torsos import check_torso
from shoal.agents.dqn import learning
from shoal.agents.dqn.config import DQNConfig, check_optimizer
from shoal.agents.dqn.networks import DQNNetworks, make_networks
from shoal.agents.dqn.presets import PRESETS
from shoal.agents.transition_replay import TABLE, TransitionReplayBuilder
from shoal.core.counting import Counter
from shoal.core.interfaces import Dataset
from shoal.core.loggers import Logger
from shoal.core.specs import EnvironmentSpec
from shoal.core.timing import Stopwatch
from shoal.core.types import Batch, Policy, Sample
from shoal.learners import ReplicatedLearner
from shoal.replay import item_priorities, transition_items_per_batch, update_item_priorities
from shoal.replay.contract import ReplayClient


class DQNBuilder(TransitionReplayBuilder):
    """Double DQN on batched n-step transitions from a rate-limited (optionally prioritized) table."""

    name = "dqn"
    presets = PRESETS  # (as a plug-in declares its own)

    config: DQNConfig

    def __init__(self, config: DQNConfig) -> None:
        super().__init__(config)

    def validate(self, spec: EnvironmentSpec, num_devices: int) -> None:
        if spec.num_actions is None:
            raise ValueError(
                f"DQN needs a discrete action space; this environment's is "
                f"{spec.action_space} (try a Discrete-action env such as CartPole-v1)"
            )
        check_optimizer(self.config)
        check_torso(self.config.torso, also=("mlp",), spec=spec)
        if self.config.torso == "mlp" and spec.dict_observations:
            raise ValueError("torso=mlp reads frames flattened: not a Dict observation (use torso=auto there)")
        super().validate(spec, num_devices)

    def priority_exponent(self) -> float | None:
        return self.config.priority_exponent if self.config.prioritized_replay else None

    def make_networks(self, spec: EnvironmentSpec) -> DQNNetworks:
        return make_networks(spec, self.config.hidden_sizes, self.config.torso)

    def make_policy(self, networks: DQNNetworks, spec: EnvironmentSpec, evaluation: bool) -> Policy:
        return learning.make_policy(networks.q_network, networks.num_actions, self.config, evaluation)

    def loss(
        self,
        network: Any,
        params: optax.Params,
        target_params: optax.Params,
        batch: Batch,
    ) -> learning.LossOutput:
        """The loss of one device's batch, per transition (``learning.LossOutput``): DQN's is
        ``learning.double_q_loss``. A DQN variant overrides this (and ``make_networks`` if its
        network differs); the optimizer, target network, importance weights and priorities stay."""
        return learning.double_q_loss(
            network, params, target_params, batch, self.config.huber_delta, self.config.double_q
        )

    def init_state(self, key: jax.Array, networks: DQNNetworks) -> learning.TrainingState:
        return learning.init_state(key, networks.q_network, networks.observation_shape, self.config)

    def make_learner(
        self,
        key: jax.Array,
        networks: DQNNetworks,
        dataset: Dataset,
        logger: Logger | None = None,
        counter: Counter | None = None,
        replay_client: ReplayClient | None = None,
        stopwatch: Stopwatch | None = None,
    ) -> ReplicatedLearner:
        c = self.config
        state = self.init_state(key, networks)
        after_update = None
        if c.prioritized_replay:
            if replay_client is None:
                raise ValueError("prioritized replay needs a replay client to write priorities")
            items_per_batch = transition_items_per_batch(c.batch_size, dataset.num_envs)

            def after_update(sample: Sample, td_abs: jax.Array) -> None:  # (on the learner's hook thread)
                td = np.asarray(td_abs)  # [batch, steps]: |TD| per transition, in the host batch's order
                priorities = item_priorities(td.T, items_per_batch, dataset.num_envs)
                update_item_priorities(replay_client, TABLE, sample.keys, priorities)

        return ReplicatedLearner(
            state,
            learning.make_update(networks.q_network, c, self.loss),
            dataset,
            after_update=after_update,
            counter=counter,
            logger=logger,
            stopwatch=stopwatch,
        )
