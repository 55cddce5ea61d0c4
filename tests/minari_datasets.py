"""Minari datasets written by Minari itself (its ``DataCollector``), for the tests of the offline
agents: what a user brings who never ran Shoal."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest


def collect(root: str, env_id: str, dataset_id: str, episodes: int, act: Callable[..., Any]) -> str:
    """A dataset of ``episodes`` episodes of ``act(observation, rng, action_space)`` on
    ``env_id``, written by Minari's own ``DataCollector`` under ``root`` (its ``DIR``)."""
    minari = pytest.importorskip("minari", reason="the offline extra")
    import gymnasium as gym

    previous = os.environ.get("MINARI_DATASETS_PATH")
    os.environ["MINARI_DATASETS_PATH"] = root
    try:
        env = minari.DataCollector(gym.make(env_id))
        rng = np.random.default_rng(0)
        for episode in range(episodes):
            observation, _ = env.reset(seed=episode)
            done = False
            while not done:
                observation, _, terminated, truncated, _ = env.step(act(observation, rng, env.action_space))
                done = terminated or truncated
        with pytest.warns(UserWarning):  # (minari asks for an author, a permalink, ...: not for a test)
            env.create_dataset(dataset_id, algorithm_name="heuristic")
        env.close()
    finally:
        if previous is None:
            del os.environ["MINARI_DATASETS_PATH"]
        else:
            os.environ["MINARI_DATASETS_PATH"] = previous
    return os.path.join(root, dataset_id)
