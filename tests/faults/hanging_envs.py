"""Environments that hang on purpose, registered on import (``--env
tests.faults.hanging_envs:HangsInStep-v0``): a call that never returns until ``RELEASE`` is set
(which a test of this process sets when it ends; in a process of its own, never)."""

import threading

import gymnasium as gym
import numpy as np
from gymnasium.envs.classic_control.cartpole import CartPoleEnv

RELEASE = threading.Event()


class HangsInStep(CartPoleEnv):
    """CartPole whose ``after``-th step (of each env) hangs."""

    def __init__(self, after=50, **kwargs):
        super().__init__(**kwargs)
        self._after, self._steps = after, 0

    def step(self, action):
        self._steps += 1
        if self._steps >= self._after:
            RELEASE.wait()
        return super().step(action)


class HangsInRender(CartPoleEnv):
    """CartPole whose ``after``-th ``render()`` hangs (earlier ones are black 40x60 frames)."""

    metadata = {**CartPoleEnv.metadata, "render_modes": ["rgb_array"]}

    def __init__(self, after=3, render_mode=None, **kwargs):
        super().__init__(render_mode=render_mode, **kwargs)
        self._after, self._renders = after, 0

    def render(self):
        self._renders += 1
        if self._renders >= self._after:
            RELEASE.wait()
        return np.zeros((40, 60, 3), np.uint8)


for name, cls in (("HangsInStep-v0", HangsInStep), ("HangsInRender-v0", HangsInRender)):
    if name not in gym.registry:
        gym.register(name, entry_point=cls, max_episode_steps=500, reward_threshold=475.0)
