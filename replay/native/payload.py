"""How a writer's steps and items travel in one ``insert`` call (``NativeReplayServer.insert``).

Steps go stacked: one array per column for each run of consecutive steps of one layout (their
columns' dtypes and shapes), with the steps' indices; items go as four arrays (tables,
priorities, lengths, step indices). A call of many small steps and items then costs the RPC
codec a few arrays, not a few Python objects per step. One-step items written whole
(``append_item``) need no step indices: they travel as ``ItemRun``s (``insert_items``), one
array per field with the items on its leading axis.
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


def block_groups(blocks: list) -> list[list]:
    """``append_rows`` blocks ``[indices, block, rows]`` (steps ``indices`` are rows ``rows`` of
    ``block``'s columns; ``NativeWriter._new_steps``) -> ``[indices, columns]`` groups as
    ``stacked_groups`` makes them, consecutive blocks of one layout joined: one array per column
    for a run of vector steps, however many envs' rows it holds (a whole block is sent as it is)."""
    runs: list[list] = []
    for indices, block, rows in blocks:
        part = block if len(rows) == len(block[0]) else [c[rows] for c in block]
        layout = [(c.dtype, c.shape[1:]) for c in part]
        if runs and runs[-1][2] == layout:
            runs[-1][0].extend(indices)
            runs[-1][1].append(part)
        else:
            runs.append([list(indices), [part], layout])
    return [
        [np.array(indices, np.int64), parts[0] if len(parts) == 1 else [np.concatenate(c) for c in zip(*parts)]]
        for indices, parts, _ in runs
    ]


def stacked(group: list[list[np.ndarray]]) -> list[np.ndarray]:
    """A group's columns, its steps on the leading axis."""
    if len(group) == 1:
        return [np.asarray(c)[np.newaxis] for c in group[0]]
    return [np.stack(column) for column in zip(*group)]


class ItemRun:
    """One-step items of one table and layout that a writer holds until its next call
    (``NativeWriter.append_item`` over RPC): each field's column preallocated, one row per item
    (copied in as it is written: the caller may reuse its arrays), and their priorities. The
    message is ``[table, priorities, columns]`` (``NativeReplayServer.insert_items``)."""

    __slots__ = ("table", "columns", "priorities", "count", "row_bytes", "layout")

    def __init__(self, table: str, columns: list[np.ndarray], capacity: int) -> None:
        self.table = table
        self.columns = [np.empty((capacity, *c.shape), c.dtype) for c in columns]
        self.priorities = np.empty(capacity, np.float64)
        self.count = 0
        self.row_bytes = sum(c.nbytes for c in columns)
        self.layout = [(c.shape, c.dtype) for c in columns]

    def fits(self, table: str, columns: list[np.ndarray]) -> bool:
        """Whether an item of ``table`` with these columns joins this run (same table and layout)."""
        return table == self.table and [(c.shape, c.dtype) for c in columns] == self.layout

    def add(self, priority: float, columns: list[np.ndarray]) -> None:
        """Copies one item's columns into the next row (the columns double when full)."""
        n = self.count
        if n == len(self.priorities):
            grown = max(2 * n, 1)
            self.columns = [
                np.concatenate([a, np.empty_like(a, shape=(grown - n, *a.shape[1:]))]) for a in self.columns
            ]
            self.priorities = np.concatenate([self.priorities, np.empty(grown - n)])
        for array, column in zip(self.columns, columns):
            array[n] = column
        self.priorities[n] = priority
        self.count = n + 1

    def message(self) -> list:
        """``[table, priorities, columns]`` of the items held (views of the run's arrays)."""
        n = self.count
        return [self.table, self.priorities[:n], [a[:n] for a in self.columns]]

    @classmethod
    def of(cls, message: list) -> ItemRun:
        """A run holding a message's items (those a rate limiter held back: sent again)."""
        table, priorities, columns = message
        run = cls(table, [c[0] for c in columns], len(priorities))
        run.columns = [np.array(c) for c in columns]
        run.priorities = np.array(priorities, np.float64)
        run.count = len(priorities)
        return run
