"""Tasks that need memory, registered by Shoal under the ``shoal/`` namespace.

* ``shoal/CartPoleNoVelocity-v1`` -- CartPole-v1 whose observation keeps the cart's position
  and the pole's angle only (``[x, theta]``: the two velocities hidden). Its dynamics, rewards,
  500-step limit and threshold (475) are CartPole-v1's. An agent must infer the velocities from
  what it saw before: a feed-forward policy sees one frame and cannot.

``shoal.envs.environments.check_env_id`` registers them the first time a ``shoal/`` id is
asked for, so ``shoal train --env shoal/CartPoleNoVelocity-v1`` needs no import of the user's.
"""

from __future__ import annotations

from typing import cast

import gymnasium as gym
import numpy as np
from gymnasium.envs.classic_control.cartpole import CartPoleEnv

NAMESPACE = "shoal/"
VISIBLE = (0, 2)  # CartPole's [x, x_dot, theta, theta_dot]: position and angle


class HideVelocities(gym.ObservationWrapper):
    """CartPole's observation without its velocities: ``[x, theta]`` (float32)."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        space = cast(gym.spaces.Box, env.observation_space)  # (CartPole's)
        low, high = space.low[list(VISIBLE)], space.high[list(VISIBLE)]
        self.observation_space = gym.spaces.Box(low, high, (len(VISIBLE),), np.float32)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return np.asarray(observation, np.float32)[list(VISIBLE)]


def cart_pole_no_velocity(**kwargs) -> gym.Env:
    """CartPole (gymnasium's ``CartPoleEnv``, ``kwargs`` its own) with its velocities hidden."""
    return HideVelocities(CartPoleEnv(**kwargs))


def register() -> None:
    """Registers the ``shoal/`` ids (once)."""
    if f"{NAMESPACE}CartPoleNoVelocity-v1" in gym.registry:
        return
    gym.register(
        f"{NAMESPACE}CartPoleNoVelocity-v1",
        entry_point="shoal.envs.memory_tasks:cart_pole_no_velocity",
        max_episode_steps=500,
        reward_threshold=475.0,
    )
