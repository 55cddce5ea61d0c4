"""A thread-safe counter of named totals (env steps, learner steps, episodes, ...)."""

from __future__ import annotations

import math
import numbers
import threading
from collections.abc import Mapping
from typing import Any

import numpy as np

from shoal.core.interfaces import Saveable

LIMIT = 2**53  # every count stays below: exact as a float too (CSV, JSON, TensorBoard, int64)


def _count(name: str, value: Any) -> int:
    """``value`` as a Python ``int`` in ``[0, 2**53)``, or a ``ValueError`` naming ``name`` and the value.

    Integral floats (``10.0``, ``np.float32(4)``) are taken as the integer they are; anything
    else (negative, ``1.5``, NaN, inf, a bool, an array, a string) is refused."""
    if type(value) is int and 0 <= value < LIMIT:  # (the usual case, every vector step: first)
        return value
    if isinstance(value, np.ndarray) and value.shape == ():
        value = value[()]
    if isinstance(value, np.generic):
        value = value.item()
    number = None
    if (
        isinstance(value, numbers.Integral)
        and not isinstance(value, bool)
        or isinstance(value, float)
        and math.isfinite(value)
        and value.is_integer()
    ):
        number = int(value)
    if number is None or not 0 <= number < LIMIT:
        raise ValueError(f"counter values must be non-negative integers below 2**53; got {name}={value!r:.60}")
    return number


class Counter(Saveable):
    """Named running totals. ``increment(env_steps=16)`` adds; ``get_counts()`` reads all.

    Counts are non-negative integers below ``2**53``. A call with any bad value (negative,
    non-integral, NaN, a bool, an array, a string) or one that would take a total to ``2**53``
    is refused whole with a ``ValueError`` (a remote caller gets it) and changes no count."""

    def __init__(self, counts: Mapping[str, int] | None = None) -> None:
        self._counts: dict[str, int] = {}
        self._lock = threading.Lock()
        if counts:
            self.restore(counts)

    def increment(self, **deltas: int) -> dict[str, int]:
        checked = {name: _count(name, delta) for name, delta in deltas.items()}  # all, before any is added
        with self._lock:
            totals = {name: self._counts.get(name, 0) + delta for name, delta in checked.items()}
            for name, total in totals.items():
                if total >= LIMIT:
                    raise ValueError(
                        f"counter {name} would reach {total:,}, not below 2**53; "
                        f"got {name}={deltas[name]!r:.60} (no count was changed)"
                    )
            self._counts.update(totals)
            return dict(self._counts)

    def get_counts(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    def save(self) -> Mapping[str, int]:
        return self.get_counts()

    def restore(self, state: Mapping[str, int]) -> None:
        checked = {str(name): _count(name, value) for name, value in state.items()}
        with self._lock:
            self._counts = checked
