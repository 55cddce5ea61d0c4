"""BC's policy network: DQN's Q-network body (``shoal.agents.dqn.networks.QNetwork``: an MLP, a
convolutional torso, or a torso per Dict key) with one output per discrete action (logits) or
per action dimension (the action before squashing into the Box)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import NamedTuple, cast

import gymnasium as gym
import numpy as np

from shoal.agents.dqn.networks import QNetwork, make_networks
from shoal.core.specs import EnvironmentSpec


class BCNetworks(NamedTuple):
    network: QNetwork  # observations -> [batch, outputs]
    observation_shape: tuple[int, ...] | dict[str, tuple[int, ...]]
    num_actions: int | None  # discrete actions, or None (continuous)
    low: np.ndarray | None  # a Box's bounds (continuous), else None
    high: np.ndarray | None


def make_bc_networks(
    spec: EnvironmentSpec, hidden_sizes: Sequence[int] = (256, 256), torso: str = "auto"
) -> BCNetworks:
    """The policy network for ``spec``: logits for a Discrete action space, a Box's flat action
    for a continuous one (bounded Box only: BC squashes into its bounds)."""
    if spec.num_actions is not None:
        q = make_networks(spec, hidden_sizes, torso)
        return BCNetworks(q.q_network, q.observation_shape, spec.num_actions, None, None)
    space = cast(gym.spaces.Box, spec.action_space)
    shape = tuple(space.shape)
    low = np.broadcast_to(np.asarray(space.low, np.float32), shape).reshape(-1)
    high = np.broadcast_to(np.asarray(space.high, np.float32), shape).reshape(-1)
    if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
        raise ValueError(f"BC squashes continuous actions into their bounds; {space} has infinite bounds")
    dims = int(np.prod(shape))
    body = make_networks(dataclasses.replace(spec, num_actions=dims), hidden_sizes, torso)  # (one output per dimension)
    return BCNetworks(body.q_network, body.observation_shape, None, low, high)
