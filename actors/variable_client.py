"""VariableClient: an actor's local copy of the learner's parameters.

Every ``update_period`` calls to ``update()`` it asks its ``VariableSource`` for parameters
newer than the version it holds. With ``asynchronous=True`` (the distributed default) the
request runs on a background thread and its result is adopted at a later ``update()``, so
acting never waits on a slow source; at most one request is in flight (bounded staleness).
With ``asynchronous=False`` the request is made inline: a seeded single-process run is then
reproducible.
"""

from __future__ import annotations

import concurrent.futures
from typing import Any

from shoal.core.interfaces import VariableSource


class VariableClient:
    def __init__(
        self, source: VariableSource, update_period: int = 1, asynchronous: bool = True, initial_timeout_s: float = 60.0
    ) -> None:
        if update_period < 1:
            raise ValueError(f"update_period must be >= 1, got {update_period}")
        self._source = source
        self._update_period = update_period
        self._calls = 0
        self._executor = (
            concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="variables") if asynchronous else None
        )
        self._future: concurrent.futures.Future | None = None
        self.version = -1
        self.params: Any = None
        self.num_fetches = 0  # how many requests were sent to the source
        self.update_and_wait(initial_timeout_s)

    def _adopt(self, result: tuple[int, Any]) -> None:
        version, params = result
        if params is not None and version > self.version:
            self.version, self.params = version, params

    def _fetch(self) -> tuple[int, Any]:
        self.num_fetches += 1
        return self._source.get_variables(self.version)

    def update(self) -> None:
        """Counts one call; every ``update_period`` calls, requests newer parameters."""
        if self._future is not None and self._future.done():
            future, self._future = self._future, None
            self._adopt(future.result())
        self._calls += 1
        if self._calls % self._update_period:
            return
        if self._executor is None:
            self._adopt(self._fetch())
        elif self._future is None:
            self._future = self._executor.submit(self._fetch)

    def update_and_wait(self, timeout_s: float = 60.0) -> None:
        """Fetches the newest parameters now, waiting at most ``timeout_s``."""
        future = (self._executor or concurrent.futures.ThreadPoolExecutor(1)).submit(self._fetch)
        try:
            self._adopt(future.result(timeout=timeout_s))
        except concurrent.futures.TimeoutError:
            raise TimeoutError(f"variable source {self._source!r} sent no parameters within {timeout_s}s") from None

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
