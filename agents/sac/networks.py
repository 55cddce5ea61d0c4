"""SAC's networks: a tanh-Gaussian policy and twin Q critics (ReLU MLPs).

The policy outputs a Gaussian over pre-squash actions ``u``; the action is
``a = scale * tanh(u) + offset``, mapping onto the env's ``[low, high]`` box, with density
(change of variables, per dimension)

    log pi(a|s) = log N(u; mu, sigma) - log(scale * (1 - tanh(u)^2))

where ``log(1 - tanh(u)^2) = 2 * (log 2 - u - softplus(-2u))`` is the numerically stable form.

For a Dict observation (``keys``), each network first reads it with a torso per key
(``shoal.agents.components.dict_observations.DictTorso``): the policy's heads read those features, each critic
concatenates them with the action before its MLP.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

import flax.linen as nn
import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np

from shoal.agents.components.dict_observations import DictTorso, ObservationKeys, observation_keys
from shoal.agents.components.flax_apply import apply_network
from shoal.core.specs import EnvironmentSpec
from shoal.core.types import Params, Pytree


class GaussianPolicy(nn.Module):
    """``observation -> (mean [batch, d], log_std [batch, d])`` of the pre-squash Gaussian."""

    hidden_sizes: Sequence[int]
    action_size: int
    log_std_min: float
    log_std_max: float
    keys: ObservationKeys | None = None  # a Dict observation's: a torso per key

    @nn.compact
    def __call__(self, observation: Pytree) -> tuple[jnp.ndarray, jnp.ndarray]:
        if self.keys is not None:
            x = DictTorso(self.keys, tuple(self.hidden_sizes))(observation)
        else:
            x = observation.reshape(observation.shape[0], -1).astype(jnp.float32)
            for size in self.hidden_sizes:
                x = nn.relu(nn.Dense(size)(x))
        mean = nn.Dense(self.action_size)(x)
        log_std = jnp.tanh(nn.Dense(self.action_size)(x))  # squashed into [min, max]
        log_std = self.log_std_min + 0.5 * (self.log_std_max - self.log_std_min) * (log_std + 1.0)
        return mean, log_std


class TwinCritic(nn.Module):
    """``(observation, action) -> (Q1, Q2)``, each ``[batch]``: two independent MLPs."""

    hidden_sizes: Sequence[int]
    keys: ObservationKeys | None = None  # a Dict observation's: a torso per key (each critic its own)

    @nn.compact
    def __call__(self, observation: Pytree, action: jnp.ndarray) -> tuple[jnp.ndarray, jnp.ndarray]:
        if self.keys is None:
            x = jnp.concatenate(
                [
                    observation.reshape(observation.shape[0], -1).astype(jnp.float32),
                    action.reshape(action.shape[0], -1),
                ],
                axis=-1,
            )
        qs = []
        for _ in range(2):
            if self.keys is not None:
                x = jnp.concatenate(
                    [DictTorso(self.keys, tuple(self.hidden_sizes))(observation), action.reshape(action.shape[0], -1)],
                    axis=-1,
                )
            h = x
            for size in self.hidden_sizes:
                h = nn.relu(nn.Dense(size)(h))
            qs.append(nn.Dense(1)(h)[:, 0])
        return qs[0], qs[1]


class SACNetworks(NamedTuple):
    policy: GaussianPolicy
    critic: TwinCritic
    observation_shape: tuple[int, ...] | dict[str, tuple[int, ...]]  # (per key, for a Dict observation)
    action_size: int
    action_scale: np.ndarray  # (high - low) / 2 per dimension
    action_offset: np.ndarray  # (high + low) / 2


def make_networks(
    spec: EnvironmentSpec, hidden_sizes: Sequence[int] = (64, 64), log_std_min: float = -5.0, log_std_max: float = 2.0
) -> SACNetworks:
    space = check_action_space(spec)
    size = spec.action.shape[0]
    observation = spec.observation
    keys = observation_keys(observation, "auto", spec.observation_space) if isinstance(observation, Mapping) else None
    return SACNetworks(
        GaussianPolicy(tuple(hidden_sizes), size, log_std_min, log_std_max, keys),
        TwinCritic(tuple(hidden_sizes), keys),
        spec.observation_shape,
        size,
        ((space.high - space.low) / 2).astype(np.float32),
        ((space.high + space.low) / 2).astype(np.float32),
    )


def check_action_space(spec: EnvironmentSpec) -> gym.spaces.Box:
    """Raises ``ValueError`` for an action space SAC cannot act in: it squashes a Gaussian into
    the bounds of a 1-d Box, which must be finite. Builds nothing; returns the Box."""
    space = spec.action_space
    if spec.num_actions is not None or not isinstance(space, gym.spaces.Box) or len(spec.action.shape) != 1:
        raise ValueError(
            f"SAC needs a 1-d continuous (Box) action space; this environment's is "
            f"{space} (for discrete actions try --agent dqn, ppo or impala)"
        )
    if not (np.all(np.isfinite(space.low)) and np.all(np.isfinite(space.high))):
        raise ValueError(
            f"SAC squashes actions into the action space's bounds, which must be "
            f"finite; got low={space.low}, high={space.high}"
        )
    return space


def squash(networks: SACNetworks, u: jnp.ndarray) -> jnp.ndarray:
    """Pre-squash actions ``u`` -> env actions ``scale * tanh(u) + offset``."""
    return networks.action_scale * jnp.tanh(u) + networks.action_offset


def tanh_gaussian_log_prob(networks: SACNetworks, u: jax.Array, mean: jax.Array, log_std: jax.Array) -> jnp.ndarray:
    """``log pi(a|s)`` of the action ``a = squash(u)`` (module docstring), summed over dims."""
    gaussian = -0.5 * jnp.square((u - mean) / jnp.exp(log_std)) - log_std - 0.5 * jnp.log(2 * jnp.pi)
    log_det = jnp.log(networks.action_scale) + 2.0 * (jnp.log(2.0) - u - jax.nn.softplus(-2.0 * u))
    return jnp.sum(gaussian - log_det, axis=-1)


def sample_action(
    networks: SACNetworks,
    params: Params,
    observation: Pytree,
    noise: jax.Array,
) -> tuple[jnp.ndarray, jnp.ndarray]:
    """The reparameterized sample ``u = mean + std * noise`` (``noise`` standard normal,
    ``[batch, d]``) as ``(action, log pi(action|s))`` for each observation."""
    mean, log_std = apply_network(networks.policy, params, observation)
    u = mean + jnp.exp(log_std) * noise
    return squash(networks, u), tanh_gaussian_log_prob(networks, u, mean, log_std)
