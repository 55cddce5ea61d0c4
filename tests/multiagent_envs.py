"""Small PettingZoo parallel envs for the multi-agent tests (``--env pettingzoo:tests.multiagent_envs``).

``parallel_env()``: *pick different*. Two agents see the same observation (the steps left,
scaled) and each picks 0 or 1; both are rewarded 1 when their picks differ, else 0, for
``length`` steps. A policy shared by both that cannot tell them apart earns 0.5 a step at best
(its picks are independent draws of one distribution); told which agent it acts for, it can
earn 1 (one agent always 0, the other always 1): the best joint policy needs coordination.

``leaving_env()``: agent ``b`` terminates halfway while ``a`` plays on (an agent that leaves).
``mixed_spaces_env()``: two agents with different observation spaces.
"""

from __future__ import annotations

import functools

import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv


class PickDifferent(ParallelEnv):
    metadata = {"name": "pick_different_v0"}

    def __init__(self, length: int = 10, leave_at: int | None = None, mixed: bool = False) -> None:
        self.possible_agents = ["a", "b"]
        self.length, self.leave_at, self.mixed = length, leave_at, mixed
        self.agents: list[str] = []

    @functools.lru_cache(maxsize=None)
    def observation_space(self, agent):
        return spaces.Box(0.0, 1.0, (2 if self.mixed and agent == "b" else 1,), np.float32)

    @functools.lru_cache(maxsize=None)
    def action_space(self, agent):
        return spaces.Discrete(2)

    def _observe(self):
        left = np.float32((self.length - self.t) / self.length)
        return {a: np.full(self.observation_space(a).shape, left, np.float32) for a in self.agents}

    def reset(self, seed=None, options=None):
        self.agents, self.t = list(self.possible_agents), 0
        return self._observe(), {a: {} for a in self.agents}

    def step(self, actions):
        self.t += 1
        reward = 1.0 if int(actions["a"]) != int(actions["b"]) else 0.0
        rewards = {a: reward for a in self.agents}
        end = self.t >= self.length
        terminations = {a: end or (a == "b" and self.leave_at is not None and self.t >= self.leave_at)
                        for a in self.agents}
        truncations = {a: False for a in self.agents}
        observations = self._observe()
        infos = {a: {} for a in self.agents}
        self.agents = [a for a in self.agents if not terminations[a]]
        return observations, rewards, terminations, truncations, infos


def parallel_env(length: int = 10) -> PickDifferent:
    return PickDifferent(length)


def leaving_env() -> PickDifferent:
    return PickDifferent(10, leave_at=5)


def mixed_spaces_env() -> PickDifferent:
    return PickDifferent(10, mixed=True)
