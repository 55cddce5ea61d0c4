"""R2D2's recurrent Q-network: a torso, an LSTM, and a dueling head (``shoal.agents.components.recurrent``
gives the state, the unroll and the torso)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from shoal.agents.components.dict_observations import ObservationKeys, observation_keys
from shoal.agents.components.recurrent import LSTMCore, make_encoder
from shoal.agents.components.torsos import Torso, choose_torso, image_spec
from shoal.core.specs import EnvironmentSpec, ObservationSpec


class RecurrentQNetwork(nn.Module):
    """``encode`` (the torso), ``core`` (an LSTM of ``lstm_size``) and ``heads``: Q values
    ``[..., num_actions]``, from a dueling head (Wang et al., 2016: ``V + A - mean(A)``, each
    through a ReLU layer of ``head_size``, as the paper's network) or, with ``head_size`` 0, one
    linear layer. ``__call__(state, observation)`` is one step: ``(state, q)``."""

    hidden_sizes: Sequence[int]
    lstm_size: int
    num_actions: int
    head_size: int = 0
    torso: Torso | None = None
    keys: ObservationKeys | None = None

    def setup(self) -> None:
        self.encoder = make_encoder(self.hidden_sizes, self.torso, self.keys)
        self.lstm = LSTMCore(self.lstm_size)
        if self.head_size:
            self.value_hidden, self.advantage_hidden = nn.Dense(self.head_size), nn.Dense(self.head_size)
            self.value, self.advantage = nn.Dense(1), nn.Dense(self.num_actions)
        else:
            self.q = nn.Dense(self.num_actions)

    def encode(self, observation: Any) -> jax.Array:
        return self.encoder(observation)

    def core(self, state: jax.Array, features: jax.Array) -> tuple[jax.Array, jax.Array]:
        return self.lstm(state, features)

    def heads(self, y: jax.Array) -> jax.Array:
        if not self.head_size:
            return self.q(y)
        value = self.value(nn.relu(self.value_hidden(y)))
        advantage = self.advantage(nn.relu(self.advantage_hidden(y)))
        return value + advantage - jnp.mean(advantage, axis=-1, keepdims=True)

    def __call__(self, state: jax.Array, observation: Any) -> tuple[jax.Array, jax.Array]:
        state, y = self.core(state, self.encode(observation))
        return state, self.heads(y)


class R2D2Networks(NamedTuple):
    network: RecurrentQNetwork
    observation_shape: tuple[int, ...] | dict[str, tuple[int, ...]]
    num_actions: int
    observation: ObservationSpec | None = None


def make_networks(
    spec: EnvironmentSpec,
    hidden_sizes: Sequence[int] = (64,),
    lstm_size: int = 64,
    head_size: int = 0,
    torso: str = "auto",
) -> R2D2Networks:
    """The Q-network for ``spec``: a convolutional ``torso`` for frames, a torso per key for a
    Dict observation, tanh layers of ``hidden_sizes`` for a flat vector."""
    if spec.num_actions is None:
        raise ValueError(f"R2D2 needs a discrete action space; this environment's is {spec.action_space}")
    observation, frames = spec.observation, image_spec(spec)
    keys = observation_keys(observation, torso, spec.observation_space) if isinstance(observation, Mapping) else None
    chosen = choose_torso(torso, frames.shape, spec.observation_space) if frames is not None else None
    network = RecurrentQNetwork(tuple(hidden_sizes), lstm_size, spec.num_actions, head_size, chosen, keys)
    return R2D2Networks(network, spec.observation_shape, spec.num_actions, spec.observation)
