"""Env factories as a user writes them (importable, top level): CartPole behind wrappers."""

from __future__ import annotations

import functools
import os

import gymnasium as gym

shell = os.system  # (names of this module that are no env factory: refused as env sources, never called)
make_folder = os.makedirs
shell_partial = functools.partial(os.system)


def short_cartpole(max_steps: int = 50) -> gym.Env:
    """CartPole whose episodes end after ``max_steps`` steps (a wrapper: returns are <= it)."""
    return gym.wrappers.TimeLimit(gym.make("CartPole-v1").unwrapped, max_episode_steps=max_steps)


three_step_cartpole = functools.partial(short_cartpole, max_steps=3)  # (factories as a partial, an instance)


class CartPoleMaker:
    def __call__(self, max_steps: int = 50) -> gym.Env:
        return short_cartpole(max_steps)


cartpole_maker = CartPoleMaker()


def not_an_env(**kwargs):
    return "CartPole-v1"


class RefuseMaskedActions(gym.Wrapper):
    """Raises if the agent takes an action that the last ``info["action_mask"]`` disallowed."""

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        self._mask = info["action_mask"]
        return obs, info

    def step(self, action):
        if not self._mask[int(action)]:
            raise RuntimeError(f"masked action {int(action)} taken (mask {self._mask.tolist()})")
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._mask = info["action_mask"]
        return obs, reward, terminated, truncated, info


def strict_taxi() -> gym.Env:
    """Taxi-v4 that raises if a masked action is taken (its info gives the mask)."""
    return RefuseMaskedActions(gym.make("Taxi-v4"))


class _InfoMask(gym.Wrapper):
    def __init__(self, env: gym.Env, mask) -> None:
        super().__init__(env)
        self._mask = mask

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        return obs, {**info, "action_mask": self._mask}

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, reward, terminated, truncated, {**info, "action_mask": self._mask}


def cartpole_with_mask(mask=(1, 1)) -> gym.Env:
    """CartPole whose info always gives ``mask`` as its action mask (bad ones, for the errors)."""
    import numpy as np

    return _InfoMask(gym.make("CartPole-v1"), np.asarray(mask, np.int8))


class _SlowSteps(gym.Wrapper):
    def __init__(self, env: gym.Env, step_s: float) -> None:
        super().__init__(env)
        self._step_s = step_s

    def step(self, action):
        import time

        time.sleep(self._step_s)
        return self.env.step(action)


def slow_cartpole(step_s: float = 0.002) -> gym.Env:
    """CartPole whose every step sleeps ``step_s`` (an env that costs time but no CPU: actors
    that wait on it leave the learner waiting, and the cores free)."""
    return _SlowSteps(gym.make("CartPole-v1"), step_s)


gym.register("SlowCartPole-v0", entry_point="tests.user_envs:slow_cartpole")  # (--env tests.user_envs:SlowCartPole-v0)
