"""Recurrent cores: an LSTM between a torso and an agent's heads, and the unroll over stored
sequences that the agents with memory (recurrent PPO, R2D2) train with.

A network here has three parts, called separately so that only the LSTM runs step by step:
``encode`` (the torso, applied to every step of a batch at once), ``core`` (one LSTM step) and
``heads``. Its state is one ``[batch, 2 * lstm_size]`` array, the LSTM's cell and hidden state
side by side (``(c, h)``), zeros at an episode's start: one array, so an actor can record it in
its extras and replay can store it (``STATE_KEY``).

The unroll over a stored sequence starts from the state the actor acted from at its first step
and resets the state to zeros before step ``t`` wherever ``first[t]``::

    s_0 = stored state
    s_t <- 0                       if first_t   (an episode began at step t)
    s_{t+1}, y_t = LSTM(s_t, encode(o_t))

``episode_starts`` derives ``first`` from a sequence's stored end flags: step ``t > 0`` starts an
episode where step ``t - 1`` ended one (terminated or truncated); step 0 never does, since the
actor already reset the state it recorded there (``shoal.actors.BatchedActor``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from shoal.agents.components.dict_observations import DictTorso, ObservationKeys, example_observation
from shoal.agents.components.flax_apply import apply_network
from shoal.agents.components.torsos import Torso, make_torso
from shoal.core.specs import ArraySpec

STATE_KEY = "core_state"  # the extras key of the state an actor acted from


class DenseStack(nn.Module):
    """``[batch, ...] -> [batch, hidden_sizes[-1]]``: tanh layers, orthogonal init (gain sqrt 2)."""

    hidden_sizes: Sequence[int]

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = x.reshape(x.shape[0], -1).astype(jnp.float32)
        for size in self.hidden_sizes:
            x = nn.tanh(nn.Dense(size, kernel_init=nn.initializers.orthogonal(np.sqrt(2)))(x))
        return x


def make_encoder(hidden_sizes: Sequence[int], torso: Torso | None, keys: ObservationKeys | None) -> nn.Module:
    """The torso before the LSTM: a torso per key for a Dict observation, a convolutional one for
    frames, tanh layers of ``hidden_sizes`` for a flat vector."""
    if keys is not None:
        return DictTorso(keys, tuple(hidden_sizes), "tanh")
    if torso is not None:
        return make_torso(torso)
    return DenseStack(tuple(hidden_sizes))


class LSTMCore(nn.Module):
    """One LSTM step on the packed state: ``(state [N, 2H], x [N, F]) -> (state, y [N, H])``."""

    size: int

    @nn.compact
    def __call__(self, state: jax.Array, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        c, h = jnp.split(state, 2, axis=-1)
        (c, h), y = nn.OptimizedLSTMCell(self.size)((c, h), x)
        return jnp.concatenate([c, h], axis=-1), y


class RecurrentActorCritic(nn.Module):
    """An actor-critic with memory: ``encode`` (the torso), ``core`` (an LSTM of ``lstm_size``
    units) and ``heads``: a categorical policy (``num_actions``) or a Gaussian one
    (``action_size`` means and a state-independent log-std), and a value, both read off the
    LSTM's output (as CleanRL's ``ppo_atari_lstm.py``). ``__call__(state, observation)`` is one
    step: ``(state, policy output, value)``."""

    hidden_sizes: Sequence[int]
    lstm_size: int
    num_actions: int | None
    action_size: int = 0
    initial_log_std: float = 0.0
    torso: Torso | None = None
    keys: ObservationKeys | None = None

    def setup(self) -> None:
        self.encoder = make_encoder(self.hidden_sizes, self.torso, self.keys)
        self.lstm = LSTMCore(self.lstm_size)
        self.policy = nn.Dense(self.num_actions or self.action_size, kernel_init=nn.initializers.orthogonal(0.01))
        self.value = nn.Dense(1, kernel_init=nn.initializers.orthogonal(1.0))
        if self.num_actions is None:
            self.log_std = self.param("log_std", nn.initializers.constant(self.initial_log_std), (self.action_size,))

    def encode(self, observation: Any) -> jax.Array:
        return self.encoder(observation)

    def core(self, state: jax.Array, features: jax.Array) -> tuple[jax.Array, jax.Array]:
        return self.lstm(state, features)

    def heads(self, y: jax.Array) -> tuple[Any, jax.Array]:
        out = self.policy(y)
        return (out if self.num_actions is not None else (out, self.log_std)), self.value(y)[..., 0]

    def __call__(self, state: jax.Array, observation: Any) -> tuple[jax.Array, Any, jax.Array]:
        state, y = self.core(state, self.encode(observation))
        return (state, *self.heads(y))


def initial_state(num: int, lstm_size: int) -> jax.Array:
    """The state of ``num`` fresh episodes: zeros ``[num, 2 * lstm_size]``."""
    return jnp.zeros((num, 2 * lstm_size), jnp.float32)


def state_spec(lstm_size: int) -> dict[str, ArraySpec]:
    """The extras entry of a recorded state (per env)."""
    return {STATE_KEY: ArraySpec((2 * lstm_size,), np.float32)}


def init_params(network: nn.Module, key: jax.Array, observation_shape: Any) -> Any:
    """Parameters of a recurrent network (``lstm_size`` attribute) for one observation."""
    return network.init(key, initial_state(1, network.lstm_size), example_observation(observation_shape))


def episode_starts(terminated: jax.Array, truncated: jax.Array) -> jax.Array:
    """``first [B, T]``: where the state resets (module docstring), from the stored end flags."""
    ended = jnp.logical_or(terminated, truncated)
    return jnp.concatenate([jnp.zeros_like(ended[:, :1]), ended[:, :-1]], axis=1)


def unroll(
    network: nn.Module,
    params: Any,
    state: jax.Array,
    observation: Any,
    first: jax.Array,
) -> tuple[jax.Array, jax.Array]:
    """The core over sequences ``observation [B, T, ...]`` from ``state [B, 2H]``, reset where
    ``first [B, T]``: ``(outputs [B, T, H], states [B, T, 2H])``, ``states[:, t]`` the state
    after step ``t``. The torso runs once on all ``B * T`` steps; only the LSTM is scanned."""
    rows, length = first.shape
    flat = jax.tree_util.tree_map(lambda x: x.reshape(rows * length, *x.shape[2:]), observation)
    features = apply_network(network, params, flat, method="encode")
    features = features.reshape(rows, length, -1).swapaxes(0, 1)  # [T, B, F]

    def step(state: jax.Array, inputs: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
        x, first_t = inputs
        state = jnp.where(first_t[:, None], 0.0, state)
        state, y = apply_network(network, params, state, x, method="core")
        return state, (y, state)

    _, (outputs, states) = jax.lax.scan(step, state, (features, first.T))
    return outputs.swapaxes(0, 1), states.swapaxes(0, 1)


def step_from(network: nn.Module, params: Any, states: jax.Array, observation: Any) -> jax.Array:
    """One core step from each of ``states [B, T, 2H]`` on ``observation [B, T, ...]`` at once
    (no scan): the outputs ``[B, T, H]``. Recurrent PPO's value of each step's next observation
    reads the state after the step (``unroll``'s ``states``)."""
    rows, length = states.shape[:2]
    flat = jax.tree_util.tree_map(lambda x: x.reshape(rows * length, *x.shape[2:]), observation)
    features = apply_network(network, params, flat, method="encode")
    _, y = apply_network(network, params, states.reshape(rows * length, -1), features, method="core")
    return y.reshape(rows, length, -1)
