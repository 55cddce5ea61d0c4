"""Small PettingZoo parallel envs for the multi-agent tests (``--env pettingzoo:tests.multiagent_envs``).

``parallel_env()``: *pick different*. Two agents see the same observation (the steps left,
scaled) and each picks 0 or 1; both are rewarded 1 when their picks differ, else 0, for
``length`` steps. A policy shared by both that cannot tell them apart earns 0.5 a step at best
(its picks are independent draws of one distribution); told which agent it acts for, it can
earn 1 (one agent always 0, the other always 1): the best joint policy needs coordination.

``leaving_env()``: agent ``b`` terminates halfway while ``a`` plays on (an agent that leaves).
``masked_leaving_env()``: the same, with ``info["action_mask"]``: ``b`` may pick only 1, and an
action a mask forbids, or one sent for an agent that has left, raises.
``mixed_spaces_env()``: two agents with different observation spaces.
``mixed_actions_env()``: different observation spaces, and ``b`` picks among 0, 1 and 2; an action
outside the agent's own space raises.
``state_env()``: the game with a global state (``state()``: the steps left and the steps taken, scaled).
``reach_env()``: *reach targets*, two agents of different continuous action sizes (1 and 2).
``vanishing_env()``: the game whose agents all leave at its end with no termination or truncation
reported (PettingZoo's API forbids it; each row would play one episode forever).
``any_args_env(**kwargs)``: the game made with whatever keyword arguments it is given.
"""

from __future__ import annotations

import functools

import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv


class PickDifferent(ParallelEnv):
    metadata = {"name": "pick_different_v0"}

    def __init__(
        self,
        length: int = 10,
        leave_at: int | None = None,
        mixed: bool = False,
        masked: bool = False,
        wide_b: bool = False,
        vanish: bool = False,
    ) -> None:
        self.possible_agents = ["a", "b"]
        self.length, self.leave_at, self.mixed, self.masked, self.wide_b = length, leave_at, mixed, masked, wide_b
        self.vanish = vanish
        self.agents: list[str] = []

    @functools.cache  # noqa: B019 -- PettingZoo asks for one space object per agent; test envs are few
    def observation_space(self, agent):
        return spaces.Box(0.0, 1.0, (2 if self.mixed and agent == "b" else 1,), np.float32)

    @functools.cache  # noqa: B019 -- PettingZoo asks for one space object per agent; test envs are few
    def action_space(self, agent):
        return spaces.Discrete(3 if self.wide_b and agent == "b" else 2)

    def _observe(self):
        left = np.float32((self.length - self.t) / self.length)
        return {a: np.full(self.observation_space(a).shape, left, np.float32) for a in self.agents}

    MASKS = {"a": np.array([1, 1], np.int8), "b": np.array([0, 1], np.int8)}

    def _infos(self):
        return {a: {"action_mask": self.MASKS[a]} if self.masked else {} for a in self.agents}

    def reset(self, seed=None, options=None):
        self.agents, self.t = list(self.possible_agents), 0
        return self._observe(), self._infos()

    def step(self, actions):
        if set(actions) != set(self.agents):
            raise RuntimeError(f"actions for {sorted(actions)}, but {self.agents} play")
        for agent, action in actions.items():
            if not self.action_space(agent).contains(int(action)):
                raise RuntimeError(f"agent {agent} took action {action}, outside its {self.action_space(agent)}")
            if self.masked and not self.MASKS[agent][int(action)]:
                raise RuntimeError(f"agent {agent} took action {action}, which its mask forbids")
        self.t += 1
        picks = [int(actions[a]) for a in ("a", "b") if a in actions]
        reward = 1.0 if len(set(picks)) == 2 else 0.0
        rewards = {a: reward for a in self.agents}
        end = self.t >= self.length
        terminations = {
            a: (end and not self.vanish) or (a == "b" and self.leave_at is not None and self.t >= self.leave_at)
            for a in self.agents
        }
        truncations = {a: False for a in self.agents}
        observations = self._observe()
        infos = self._infos()
        self.agents = [] if end else [a for a in self.agents if not terminations[a]]
        return observations, rewards, terminations, truncations, infos


def parallel_env(length: int = 10) -> PickDifferent:
    return PickDifferent(length)


def leaving_env() -> PickDifferent:
    return PickDifferent(10, leave_at=5)


def masked_leaving_env() -> PickDifferent:
    return PickDifferent(10, leave_at=5, masked=True)


def vanishing_env() -> PickDifferent:
    return PickDifferent(10, vanish=True)


def any_args_env(**kwargs) -> PickDifferent:
    return PickDifferent(**kwargs)


def mixed_spaces_env() -> PickDifferent:
    return PickDifferent(10, mixed=True)


def mixed_actions_env() -> PickDifferent:
    return PickDifferent(10, mixed=True, wide_b=True)


class StatePickDifferent(PickDifferent):
    state_space = spaces.Box(0.0, 1.0, (2,), np.float32)

    def state(self):
        return np.array([(self.length - self.t) / self.length, self.t / self.length], np.float32)


def state_env() -> StatePickDifferent:
    return StatePickDifferent(10)


class ReachTargets(ParallelEnv):
    """Two agents of different continuous action sizes: ``a`` moves 1 number, ``b`` 2, in
    [-3, 3] (wide: a policy of std 1 around a target is rarely clipped; ``a_bound``: ``a``'s
    bound; ``b_size=1``: ``b`` moves 1 number too); each is rewarded ``-|action - target|^2``
    (targets 0.5 and (-0.5, 0.5)) for 10 steps. The env raises on an action of the wrong shape or
    outside its bounds, and keeps the last actions (``last_actions``)."""

    metadata = {"name": "reach_targets_v0"}
    TARGETS = {"a": np.array([0.5], np.float32), "b": np.array([-0.5, 0.5], np.float32)}

    def __init__(self, a_bound: float = 3.0, b_size: int = 2) -> None:
        self.possible_agents = ["a", "b"]
        self.agents: list[str] = []
        self.bounds = {"a": a_bound, "b": 3.0}
        self.targets = {"a": self.TARGETS["a"], "b": self.TARGETS["b"][:b_size]}

    @functools.cache  # noqa: B019 -- PettingZoo asks for one space object per agent; test envs are few
    def observation_space(self, agent):
        return spaces.Box(0.0, 1.0, (1,), np.float32)

    @functools.cache  # noqa: B019 -- PettingZoo asks for one space object per agent; test envs are few
    def action_space(self, agent):
        return spaces.Box(-self.bounds[agent], self.bounds[agent], self.targets[agent].shape, np.float32)

    def _observe(self):
        return {a: np.array([self.t / 10], np.float32) for a in self.agents}

    def reset(self, seed=None, options=None):
        self.agents, self.t = list(self.possible_agents), 0
        return self._observe(), {a: {} for a in self.agents}

    def step(self, actions):
        rewards = {}
        for agent, action in actions.items():
            action = np.asarray(action, np.float32)
            if not self.action_space(agent).contains(action):
                raise RuntimeError(f"agent {agent} took action {action}, outside its {self.action_space(agent)}")
            self.last_actions = {**getattr(self, "last_actions", {}), agent: action}
            rewards[agent] = -float(np.sum(np.square(action - self.targets[agent])))
        self.t += 1
        end = self.t >= 10
        terminations = {a: end for a in self.agents}
        truncations = {a: False for a in self.agents}
        observations, infos = self._observe(), {a: {} for a in self.agents}
        self.agents = [] if end else self.agents
        return observations, rewards, terminations, truncations, infos


def reach_env(a_bound: float = 3.0, b_size: int = 2) -> ReachTargets:
    return ReachTargets(a_bound, b_size)
