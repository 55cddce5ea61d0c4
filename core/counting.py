"""A thread-safe counter of named totals (env steps, learner steps, episodes, ...)."""

from __future__ import annotations

import math
import numbers
import threading
from typing import Any, Mapping

import numpy as np

from shoal.core.interfaces import Saveable


def _number(name: str, value: Any) -> float:
    """``value`` as a finite Python number, or a ``ValueError`` naming ``name`` and the value."""
    if isinstance(value, np.ndarray) and value.shape == ():
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise ValueError(f"counter values must be finite numbers; got {name}={value!r:.60}")
    return value.item() if isinstance(value, np.generic) else value


class Counter(Saveable):
    """Named running totals. ``increment(env_steps=16)`` adds; ``get_counts()`` reads all.

    Every value must be a finite number: anything else (an array, NaN, a string) is refused
    with a ``ValueError`` and leaves the counter unchanged (a remote caller gets the error)."""

    def __init__(self, counts: Mapping[str, float] | None = None) -> None:
        self._counts: dict[str, float] = {}
        self._lock = threading.Lock()
        if counts:
            self.restore(counts)

    def increment(self, **deltas: float) -> dict[str, float]:
        checked = {name: _number(name, delta) for name, delta in deltas.items()}  # all, before any is added
        with self._lock:
            for name, delta in checked.items():
                self._counts[name] = self._counts.get(name, 0) + delta
            return dict(self._counts)

    def get_counts(self) -> dict[str, float]:
        with self._lock:
            return dict(self._counts)

    def save(self) -> Mapping[str, float]:
        return self.get_counts()

    def restore(self, state: Mapping[str, float]) -> None:
        checked = {str(name): _number(name, value) for name, value in state.items()}
        with self._lock:
            self._counts = checked
