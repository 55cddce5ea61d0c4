"""A tiny scripted gymnasium env for exact tests.

Observation ``[episode, t]`` (``t`` = steps taken in the episode so far); the reward of the
step taken at ``t`` is ``t + 1``. Every episode lasts ``length`` steps and then terminates
(``ending="terminated"``) or is truncated (``ending="truncated"``).
"""

import gymnasium as gym
import numpy as np


class ScriptedEnv(gym.Env):
    def __init__(self, length: int = 4, ending: str = "terminated"):
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self._length, self._ending = length, ending
        self._episode, self._t = -1, 0

    def _obs(self):
        return np.array([self._episode, self._t], np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._episode, self._t = self._episode + 1, 0
        return self._obs(), {}

    def step(self, action):
        reward = float(self._t + 1)
        self._t += 1
        ended = self._t == self._length
        return (self._obs(), reward, ended and self._ending == "terminated", ended and self._ending == "truncated", {})
