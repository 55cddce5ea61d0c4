"""Environments that fail on purpose, registered on import: use them as
``--env tests.faults.faulty_envs:RaisesInStep-v0`` (gymnasium's module:id syntax)."""

import gymnasium as gym
import numpy as np
from gymnasium.envs.classic_control.cartpole import CartPoleEnv

FAIL_AFTER = 200  # steps of one env


class RaisesInStep(CartPoleEnv):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._steps = 0

    def step(self, action):
        self._steps += 1
        if self._steps > FAIL_AFTER:
            raise RuntimeError("the simulator lost its connection")
        return super().step(action)


class NaNObservations(RaisesInStep):
    def step(self, action):
        self._steps += 1
        obs, reward, terminated, truncated, info = CartPoleEnv.step(self, action)
        if self._steps > FAIL_AFTER:
            obs = np.full_like(obs, np.nan)
        return obs, reward, terminated, truncated, info


class HugeRewards(CartPoleEnv):
    """CartPole whose every reward is ``reward``: 1e308 (two of them overflow a float), or inf."""

    def __init__(self, reward=1e308, **kwargs):
        super().__init__(**kwargs)
        self._reward = reward

    def step(self, action):
        obs, _, terminated, truncated, info = super().step(action)
        return obs, self._reward, terminated, truncated, info


for name, cls, kwargs in (("RaisesInStep-v0", RaisesInStep, {}), ("NaNObservations-v0", NaNObservations, {}),
                          ("HugeRewards-v0", HugeRewards, {}),
                          ("InfiniteRewards-v0", HugeRewards, {"reward": float("inf")})):
    if name not in gym.registry:
        gym.register(name, entry_point=cls, max_episode_steps=500, reward_threshold=475.0, kwargs=kwargs)
