"""The IQL builder: BC's replay half (the dataset's single transitions, filled once:
``shoal.agents.bc.builder``) with the critics' discount in each transition, and IQL's networks,
learner and greedy policy."""

from __future__ import annotations

from collections.abc import Mapping

import gymnasium as gym
import jax
import numpy as np

from shoal.agents.bc.builder import BCBuilder
from shoal.agents.builders import ExtrasSpec
from shoal.agents.components.torsos import is_image, is_image_array
from shoal.agents.iql import learning
from shoal.agents.iql.config import IQLConfig
from shoal.agents.iql.networks import IQLNetworks, make_iql_networks
from shoal.agents.iql.presets import PRESETS
from shoal.agents.transition_replay import TABLE
from shoal.core.interfaces import Adder
from shoal.core.specs import EnvironmentSpec
from shoal.core.types import Policy
from shoal.learners.updates import UpdateFn
from shoal.replay import NStepTransitionAdder
from shoal.replay.contract import ReplayClient


class IQLBuilder(BCBuilder):
    """Implicit Q-learning on a dataset's single transitions (``shoal train --agent iql --dataset
    PATH``), discrete or continuous actions, evaluated greedily on the env."""

    name = "iql"
    presets = PRESETS

    config: IQLConfig

    def __init__(self, config: IQLConfig) -> None:
        super().__init__(config)

    def validate(self, spec: EnvironmentSpec, num_devices: int) -> None:
        super().validate(spec, num_devices)
        space = spec.action_space
        if spec.num_actions is None and not (
            isinstance(space, gym.spaces.Box)
            and len(space.shape) == 1
            and np.all(np.isfinite(space.low))
            and np.all(np.isfinite(space.high))
        ):
            raise ValueError(
                f"iql acts in a Discrete action space or a 1-d Box with finite bounds (its mean is squashed "
                f"into them); this environment's is {space}"
            )
        observation = spec.observation
        images = is_image(spec) or (
            isinstance(observation, Mapping) and any(is_image_array(array) for array in observation.values())
        )
        if spec.num_actions is None and images:
            raise ValueError(
                "iql reads image observations with continuous actions through no convolutional torso yet "
                "(its twin critics are SAC's MLPs): use discrete actions, or observations without images"
            )

    def make_adder(self, replay_client: ReplayClient, spec: EnvironmentSpec, extras: ExtrasSpec | None = None) -> Adder:
        # single transitions whose discount is gamma * (1 - terminated)
        return NStepTransitionAdder(replay_client, TABLE, spec, 1, self.config.discount)

    def make_networks(self, spec: EnvironmentSpec) -> IQLNetworks:  # type: ignore[override]  # (IQL's, not BC's)
        return make_iql_networks(spec, self.config.hidden_sizes, self.config.torso)

    def make_policy(self, networks: IQLNetworks, spec: EnvironmentSpec, evaluation: bool) -> Policy:  # type: ignore[override]
        return learning.make_policy(networks)

    def init_state(self, key: jax.Array, networks: IQLNetworks) -> learning.TrainingState:  # type: ignore[override]
        return learning.init_state(key, networks, self.config)

    def make_update(self, networks: IQLNetworks) -> UpdateFn:  # type: ignore[override]  # (IQL's losses)
        return learning.make_update(networks, self.config)
