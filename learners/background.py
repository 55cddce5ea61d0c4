"""The learner's background threads (host-side only: no device code here).

* ``DevicePrefetcher`` pulls the next host batches from replay on a thread of its own and
  places them (``place``) while the current update runs. The thread starts when the first batch
  is asked for: opening replay's dataset imports TensorFlow (seconds of CPU), which is then not
  spent while a learner node compiles its update and before it serves its parameters.
* ``HostHook`` runs the agent's after-update hook (e.g. DQN's priority writes) on a thread of
  its own, in update order, off the update's critical path.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

from shoal.core.interfaces import Dataset, as_dataset


class DevicePrefetcher:
    """Iterates ``(host_sample, device_data)``: host samples (with ``.data``) pulled from
    ``dataset`` on a background thread and placed there (``place``), ``buffer_size`` ahead. (A
    plain iterator of samples is taken as an ``IteratorDataset``: ``as_dataset``.)"""

    def __init__(
        self, dataset: Dataset, place: Callable[[Any], Any], buffer_size: int = 2, timeout_s: float = 120.0
    ) -> None:
        self._dataset, self._place, self._timeout_s = as_dataset(dataset), place, timeout_s
        self._what = f"replay table '{self._dataset.table}'"
        self._queue: queue.Queue = queue.Queue(maxsize=buffer_size)
        self._delivering = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._fill, name="device-prefetch", daemon=True)
        self._start = threading.Lock()

    def _ensure_started(self) -> None:
        with self._start:
            if self._thread.ident is None and not self._stop.is_set():
                self._thread.start()

    def _fill(self) -> None:
        try:
            while not self._stop.is_set():
                sample = next(self._dataset)
                self._delivering = True  # served by replay; on its way to the devices
                self._put((sample, self._place(sample.data)))
                self._delivering = False
        except BaseException as e:  # noqa: BLE001 -- handed to the consumer, re-raised there
            if not self._stop.is_set():
                self._put(e)

    def _put(self, item: Any) -> None:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def ready(self) -> bool:
        """True when replay already served the next batch (``next`` waits at most for its
        placement on the devices)."""
        self._ensure_started()
        return self._delivering or not self._queue.empty()

    def __iter__(self) -> DevicePrefetcher:
        return self

    def __next__(self) -> tuple[Any, Any]:
        self._ensure_started()
        try:
            item = self._queue.get(timeout=self._timeout_s)
        except queue.Empty:
            raise TimeoutError(
                f"waited {self._timeout_s}s for a batch from {self._what} (is anything inserting? "
                "the table's rate limiter holds sampling back until enough items arrived)"
            ) from None
        if isinstance(item, BaseException):
            raise RuntimeError(f"sampling from {self._what} failed: {item!r}") from item
        return item

    def close(self, timeout_s: float = 10.0) -> None:
        """Stops the thread and waits for it to end, at most ``timeout_s`` (the dataset is closed,
        so a blocked ``next`` ends: within its poll while replay still serves). A thread left
        blocked in a replay stream whose server is then stopped would never end, and its stream
        would keep retrying in the background: so a learner closes before its replay server."""
        self._stop.set()
        self._dataset.close()
        if self._thread.ident is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)


class HostHook:
    """Runs ``hook(sample, aux)`` for each update on a thread of its own, in update order, so
    that reading ``aux`` back (which waits for the update) stays off the update's critical
    path. At most ``depth`` updates wait for it; a failure is raised at the next ``put``."""

    def __init__(self, hook: Callable[[Any, Any], None], depth: int = 4) -> None:
        self._hook = hook
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="learner-host-hook", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            try:
                self._hook(*item)
            except BaseException as e:  # noqa: BLE001 -- re-raised in the learner's thread
                self._error = self._error or e

    def put(self, sample: Any, aux: Any) -> None:
        if self._error is not None:
            raise RuntimeError(f"the learner's after-update hook failed: {self._error!r}") from self._error
        self._queue.put((sample, aux))

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=30)
