"""The Q network: observations -> one value per discrete action, through an MLP (flat
observations), a convolutional torso (image observations, ``shoal.agents.components.torsos``), or a torso
per key (Dict observations, ``shoal.agents.components.dict_observations``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

import flax.linen as nn
import jax.numpy as jnp

from shoal.agents.components.dict_observations import DictTorso, ObservationKeys, observation_keys
from shoal.agents.components.torsos import Torso, choose_torso, frame_scale, image_spec, make_torso
from shoal.core.specs import EnvironmentSpec
from shoal.core.types import Pytree


class QNetwork(nn.Module):
    hidden_sizes: Sequence[int]
    num_actions: int
    torso: Torso | None = None  # the convolutional torso, for image observations
    keys: ObservationKeys | None = None  # a Dict observation's keys: a torso per key
    scale: float = 1.0  # (frames read by the MLP, torso=mlp: what brings them to [0, 1])

    @property
    def has_convolutions(self) -> bool:
        """Whether it runs a convolutional torso (its SGD steps are then unrolled, ``shoal.learners.updates``)."""
        return self.torso is not None or bool(self.keys and self.keys.images)

    @nn.compact
    def __call__(self, observation: Pytree) -> jnp.ndarray:
        if self.keys is not None:
            x = DictTorso(self.keys, tuple(self.hidden_sizes), "relu")(observation)
        elif self.torso is not None:
            x = make_torso(self.torso)(observation)
        else:
            x = observation.reshape(observation.shape[0], -1).astype(jnp.float32)  # [batch, features]
            if self.scale != 1.0:
                x = x * self.scale
            for size in self.hidden_sizes:
                x = nn.relu(nn.Dense(size)(x))
        return nn.Dense(self.num_actions)(x)


class DQNNetworks(NamedTuple):
    q_network: QNetwork
    observation_shape: tuple[int, ...] | dict[str, tuple[int, ...]]  # (per key, for a Dict observation)
    num_actions: int


def make_networks(spec: EnvironmentSpec, hidden_sizes: Sequence[int] = (64, 64), torso: str = "auto") -> DQNNetworks:
    """The Q network for ``spec``: ``torso`` (``shoal.agents.components.torsos``) reads image observations
    or image keys, MLPs of ``hidden_sizes`` the rest (and, for images, nothing more: the torso's
    features go straight to the output layer); ``torso=mlp``: no torso, the frames flattened
    (and scaled to [0, 1]) into the MLP."""
    if spec.num_actions is None:
        raise ValueError(f"DQN needs a discrete action space, got {spec.action_space}")
    observation, frames = spec.observation, image_spec(spec)
    if isinstance(observation, Mapping):
        keys = observation_keys(observation, torso, spec.observation_space)
        network = QNetwork(tuple(hidden_sizes), spec.num_actions, None, keys)
    elif frames is not None and torso == "mlp":
        network = QNetwork(tuple(hidden_sizes), spec.num_actions, scale=frame_scale(spec.observation_space))
    elif frames is not None:
        network = QNetwork(
            tuple(hidden_sizes), spec.num_actions, choose_torso(torso, frames.shape, spec.observation_space)
        )
    else:
        network = QNetwork(tuple(hidden_sizes), spec.num_actions)
    return DQNNetworks(network, spec.observation_shape, spec.num_actions)
