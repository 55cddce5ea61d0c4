"""Env factories as a user writes them (importable, top level): CartPole behind wrappers."""

from __future__ import annotations

import gymnasium as gym


def short_cartpole(max_steps: int = 50) -> gym.Env:
    """CartPole whose episodes end after ``max_steps`` steps (a wrapper: returns are <= it)."""
    return gym.wrappers.TimeLimit(gym.make("CartPole-v1").unwrapped, max_episode_steps=max_steps)


def not_an_env(**kwargs):
    return "CartPole-v1"
