"""How a writer's steps and items travel in one ``insert`` call (``NativeReplayServer.insert``).

Steps go stacked: one array per column for each run of consecutive steps of one layout (their
columns' dtypes and shapes), with the steps' indices; items go as four arrays (tables,
priorities, lengths, step indices). A call of many small steps and items then costs the RPC
codec a few arrays, not a few Python objects per step.
"""

from __future__ import annotations

import numpy as np


def indices(values: list[int]) -> np.ndarray:
    """Step indices as the call takes them (int64)."""
    return np.array(values, np.int64)


def item_payload(items: list[list]) -> list:
    """Items ``[table, priority, step indices]`` as ``NativeReplayServer.insert`` takes them:
    ``[tables, priorities, lengths, indices]``."""
    return [
        [table for table, _, _ in items],
        np.array([priority for _, priority, _ in items], np.float64),
        np.array([len(steps) for _, _, steps in items], np.int64),
        np.array([i for _, _, steps in items for i in steps], np.int64),
    ]


def groups(steps: list[list]) -> list[tuple[np.ndarray, list[list[np.ndarray]]]]:
    """``[index, columns]`` steps -> ``(indices, [columns, ...])`` runs of steps whose columns
    have one layout (dtypes and shapes: they stack), in order."""
    runs: list[tuple[list[int], list]] = []
    layout = None
    for index, columns in steps:
        this = [(c.dtype, c.shape) for c in columns]
        if this != layout:
            runs.append(([], []))
            layout = this
        runs[-1][0].append(index)
        runs[-1][1].append(columns)
    return [(np.array(indices, np.int64), group) for indices, group in runs]


def layouts(group: list[list[np.ndarray]]) -> list[tuple[np.dtype, tuple]]:
    """Each stacked column's ``(dtype, shape)`` for a group of steps."""
    return [(c.dtype, (len(group), *c.shape)) for c in group[0]]


def stacked_groups(steps: list[list]) -> list[list]:
    """``[index, columns]`` steps -> ``[indices, stacked columns]`` per run of one layout."""
    return [[indices, stacked(group)] for indices, group in groups(steps)]


def stacked(group: list[list[np.ndarray]]) -> list[np.ndarray]:
    """A group's columns, its steps on the leading axis."""
    if len(group) == 1:
        return [np.asarray(c)[np.newaxis] for c in group[0]]
    return [np.stack(column) for column in zip(*group)]
