"""The Q network: observations -> one value per discrete action, through an MLP (flat
observations), a convolutional torso (image observations, ``shoal.agents.torsos``), or a torso
per key (Dict observations, ``shoal.agents.observations``)."""

from __future__ import annotations

from typing import NamedTuple, Sequence

import flax.linen as nn
import jax.numpy as jnp

from shoal.agents.observations import DictTorso, ObservationKeys, observation_keys
from shoal.agents.torsos import is_image, make_torso
from shoal.core.specs import EnvironmentSpec


class QNetwork(nn.Module):
    hidden_sizes: Sequence[int]
    num_actions: int
    torso: str | None = None  # a convolutional torso's name, for image observations (or image keys)
    keys: ObservationKeys | None = None  # a Dict observation's keys: a torso per key

    @nn.compact
    def __call__(self, observation) -> jnp.ndarray:
        if self.keys is not None:
            x = DictTorso(self.keys, tuple(self.hidden_sizes), self.torso or "nature", "relu")(observation)
        elif self.torso is not None:
            x = make_torso(self.torso)(observation)
        else:
            x = observation.reshape(observation.shape[0], -1).astype(jnp.float32)  # [batch, features]
            for size in self.hidden_sizes:
                x = nn.relu(nn.Dense(size)(x))
        return nn.Dense(self.num_actions)(x)


class DQNNetworks(NamedTuple):
    q_network: QNetwork
    observation_shape: tuple[int, ...] | dict[str, tuple[int, ...]]  # (per key, for a Dict observation)
    num_actions: int


def make_networks(spec: EnvironmentSpec, hidden_sizes: Sequence[int] = (64, 64), torso: str = "nature") -> DQNNetworks:
    if spec.num_actions is None:
        raise ValueError(f"DQN needs a discrete action space, got {spec.action_space}")
    if spec.dict_observations:
        keys = observation_keys(spec.observation)
        network = QNetwork(tuple(hidden_sizes), spec.num_actions, torso if keys.images else None, keys)
    else:
        network = QNetwork(tuple(hidden_sizes), spec.num_actions, torso if is_image(spec) else None)
    return DQNNetworks(network, spec.observation_shape, spec.num_actions)
