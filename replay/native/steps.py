"""The native server's step store: steps by id, reference-counted, a writer's steps laid in
chunked column arrays so that an item of consecutive steps is gathered as slices (``StepStore``).
"""

from __future__ import annotations

import threading
from typing import Any, Sequence

import numpy as np

CHUNK_BYTES = 256 * 1024  # a writer's steps are laid in chunks of about this many bytes
MAX_CHUNK_ROWS = 256  # and at most this many steps


class _Chunk:
    """Rows of one writer's consecutive steps: an array per column, ``[rows, ...]``; ``ids``
    the steps of it the store holds (none: the store lets go of it), ``written`` how many rows
    were filled."""

    __slots__ = ("columns", "ids", "written")

    def __init__(self, columns: list[np.ndarray]) -> None:
        self.columns, self.written = columns, 0
        self.ids: set[Any] = set()


def _consecutive(step_ids: Sequence[Any]) -> bool:
    """Whether ``step_ids`` are one writer's steps ``(writer, i), (writer, i + 1), ...``."""
    writer, start = step_ids[0]
    return all(s[0] == writer and s[1] == start + k for k, s in enumerate(step_ids))


class StepStore:
    """Steps by id, each with a reference count (the items that use it, plus one while its
    writer holds it). Thread-safe. A step's columns are kept with a leading axis of 1.

    A writer's steps (ids ``(writer, index)``) are laid row by row into the column arrays of a
    chunk (``_Chunk``: ``index // rows``, rows chosen from the step's size, ``CHUNK_BYTES`` and
    ``MAX_CHUNK_ROWS``), each step's columns views of its row. An item of a writer's
    consecutive steps is then gathered (``gather``) as one slice per column and chunk it spans,
    not one array per step: R2D2's 80-step items cost one ``np.concatenate`` of 2,560 arrays per
    column a batch of 32 before. Other ids (a restored checkpoint's) keep their own arrays."""

    def __init__(self) -> None:
        self._steps: dict[Any, list] = {}  # id -> [columns, references, chunk or None, row, chunk key]
        self._chunks: dict[tuple, _Chunk] = {}
        self._lock = threading.Lock()

    def add(self, step_id: Any, columns: list) -> None:
        with self._lock:
            if step_id in self._steps:
                self._forget(step_id)
            self._steps[step_id] = self._place(step_id, columns)

    def _place(self, step_id: Any, columns: list) -> list:
        """(Under the lock) the entry of a new step: laid into its writer's chunk when it has one."""
        if not (isinstance(step_id, tuple) and len(step_id) == 2 and isinstance(step_id[1], int) and columns):
            return [columns, 1, None, 0, None]
        size = sum(c.nbytes for c in columns)
        rows = max(1, min(MAX_CHUNK_ROWS, CHUNK_BYTES // max(1, size)))
        key = (step_id[0], rows, step_id[1] // rows)
        chunk = self._chunks.get(key)
        if chunk is None:
            chunk = self._chunks[key] = _Chunk([np.empty((rows, *c.shape[1:]), c.dtype) for c in columns])
        elif len(chunk.columns) != len(columns) or any(
            a.shape[1:] != c.shape[1:] or a.dtype != c.dtype for a, c in zip(chunk.columns, columns)
        ):
            return [columns, 1, None, 0, None]  # (a step unlike its writer's others keeps its arrays)
        row = step_id[1] % rows
        for array, column in zip(chunk.columns, columns):
            array[row] = column[0]
        chunk.ids.add(step_id)
        chunk.written += 1
        return [[array[row : row + 1] for array in chunk.columns], 1, chunk, row, key]

    def _forget(self, step_id: Any) -> None:
        """(Under the lock) drops a step, and its chunk once no step of it is held. A full
        chunk of which a quarter or less is held gives its steps arrays of their own and is let
        go of: the steps an item keeps long (a remover that is not FIFO) hold no more than
        four times their size."""
        _, _, chunk, _, key = self._steps.pop(step_id)
        if chunk is None:
            return
        chunk.ids.discard(step_id)
        rows = len(chunk.columns[0])
        if chunk.ids and not (chunk.written == rows and 4 * len(chunk.ids) <= rows):
            return
        for kept in chunk.ids:
            entry = self._steps[kept]
            entry[0], entry[2], entry[4] = [np.array(view) for view in entry[0]], None, None
        chunk.ids = set()
        if self._chunks.get(key) is chunk:
            del self._chunks[key]

    def hold(self, step_ids: Sequence[Any]) -> tuple:
        with self._lock:
            missing = [s for s in step_ids if s not in self._steps]
            if missing:
                raise KeyError(f"an item references steps the server does not hold: {missing[:3]}")
            for s in step_ids:
                self._steps[s][1] += 1
        return tuple(step_ids)

    def release(self, step_ids: Sequence[Any]) -> None:
        with self._lock:
            for s in step_ids:
                entry = self._steps.get(s)
                if entry is not None:
                    entry[1] -= 1
                    if entry[1] <= 0:
                        self._forget(s)

    def get(self, step_ids: Sequence[Any]) -> list[list]:
        """Each step's columns (leading axis 1)."""
        with self._lock:
            return [self._steps[s][0] for s in step_ids]

    def gather(self, step_ids: Sequence[Any]) -> list[np.ndarray]:
        """The steps' columns, one array per column with the steps on the leading axis: slices
        of the chunks where the steps are consecutive rows (one per chunk spanned), else one
        ``np.concatenate`` of the steps' arrays."""
        n = len(step_ids)
        with self._lock:
            first, last = self._steps[step_ids[0]], self._steps[step_ids[-1]]
            chunk, row = first[2], first[3]
            if chunk is not None and last[2] is chunk and last[3] - row == n - 1 and _consecutive(step_ids):
                return [array[row : row + n] for array in chunk.columns]  # (the common case: one slice)
            entries = [self._steps[s] for s in step_ids]
        runs: list[tuple[_Chunk, int, int]] = []  # (chunk, first row, rows)
        for columns, _, chunk, row, _ in entries:
            if chunk is None:
                runs = []
                break
            if runs and runs[-1][0] is chunk and runs[-1][1] + runs[-1][2] == row:
                runs[-1] = (chunk, runs[-1][1], runs[-1][2] + 1)
            else:
                runs.append((chunk, row, 1))
        if runs and len(runs) <= 4:
            return [
                np.concatenate([chunk.columns[c][first_row : first_row + rows] for chunk, first_row, rows in runs])
                for c in range(len(runs[0][0].columns))
            ]
        return [np.concatenate(column) for column in zip(*(entry[0] for entry in entries))]

    def __len__(self) -> int:
        return len(self._steps)

    def __contains__(self, step_id: Any) -> bool:
        return step_id in self._steps


__all__ = ["CHUNK_BYTES", "MAX_CHUNK_ROWS", "StepStore"]
