"""A thread-safe counter of named totals (env steps, learner steps, episodes, ...)."""

from __future__ import annotations

import threading
from typing import Mapping

from shoal.core.interfaces import Saveable


class Counter(Saveable):
    """Named running totals. ``increment(env_steps=16)`` adds; ``get_counts()`` reads all."""

    def __init__(self) -> None:
        self._counts: dict[str, float] = {}
        self._lock = threading.Lock()

    def increment(self, **deltas: float) -> dict[str, float]:
        with self._lock:
            for name, delta in deltas.items():
                self._counts[name] = self._counts.get(name, 0) + delta
            return dict(self._counts)

    def get_counts(self) -> dict[str, float]:
        with self._lock:
            return dict(self._counts)

    def save(self) -> Mapping[str, float]:
        return self.get_counts()

    def restore(self, state: Mapping[str, float]) -> None:
        with self._lock:
            self._counts = dict(state)
