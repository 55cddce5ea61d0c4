"""Writing priorities back to a prioritized replay table (either backend)."""

from __future__ import annotations

import numpy as np

from shoal.replay.contract import ReplayClient


def item_priorities(td_abs: np.ndarray, items_per_batch: int, num_envs: int, epsilon: float = 1e-6) -> np.ndarray:
    """Per-item priorities ``[steps, items]`` from per-transition ``|TD|`` ``[steps, batch]``.

    Transition ``b`` of step ``s`` came from item ``b // num_envs`` of that step (the layout of
    ``transition_batches``); an item's priority is the largest ``|TD| + epsilon`` of those of its
    transitions that were trained on (the last item of a batch may be partly used).
    """
    steps, batch = td_abs.shape
    padded = np.full((steps, items_per_batch * num_envs), -np.inf)
    padded[:, :batch] = td_abs
    return padded.reshape(steps, items_per_batch, num_envs).max(axis=-1) + epsilon


def update_item_priorities(client: ReplayClient, table: str, keys: np.ndarray, priorities: np.ndarray) -> None:
    """Sets ``priorities[i]`` for item ``keys[i]`` (same shapes); a key sampled twice keeps the last."""
    updates = dict(zip(keys.reshape(-1).tolist(), priorities.reshape(-1).astype(float).tolist()))
    client.mutate_priorities(table, updates=updates)
