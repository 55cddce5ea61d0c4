"""The data-parallel learner. Every ``pmap``-specific line of Shoal lives in this module.

``ReplicatedLearner`` keeps the training state replicated on every local device and runs

    update = pmap(update_fn, AXIS_NAME, donate_argnums=0)

on batches whose leading axis is split across the devices (``[num_devices, batch/num_devices,
...]``). ``update_fn`` is the agent's (see ``shoal.learners.updates``): k scanned SGD steps,
epochs x minibatches over a rollout, ... A background thread (``DevicePrefetcher``) pulls host
batches from replay and ``device_put``s their shards, so an update never waits on Python for a
batch Reverb already served. After each update the copy of device 0's params to the host is
started asynchronously; ``get_variables`` serves that host copy (materialized once per version),
with the version. (JAX >= 0.8 keeps ``pmap`` in maintenance mode; ``shard_map`` over a mesh is
the later path, and only this module would change.)
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any, Callable, Iterator, Mapping, Sequence

import jax
import numpy as np

from shoal.core.counting import Counter
from shoal.core.interfaces import Learner
from shoal.core.loggers import Logger, NoOpLogger
from shoal.core.timing import Stopwatch, breakdown
from shoal.learners.updates import AXIS_NAME, UpdateFn

__all__ = ["AXIS_NAME", "DevicePrefetcher", "ReplicatedLearner", "replicate", "shard"]


def replicate(tree: Any, devices: Sequence[jax.Device]) -> Any:
    return jax.device_put_replicated(tree, list(devices))


def shard(tree: Any, devices: Sequence[jax.Device]) -> Any:
    """Host arrays ``[batch, ...]`` -> device arrays ``[num_devices, batch/num_devices, ...]``:
    device ``d`` gets rows ``d*b .. (d+1)*b - 1`` (``b = batch / num_devices``)."""
    n = len(devices)

    def split(x):
        x = np.asarray(x)
        if x.shape[0] % n:
            raise ValueError(f"batch of {x.shape[0]} rows cannot be split over {n} devices")
        return jax.device_put_sharded(list(x.reshape(n, x.shape[0] // n, *x.shape[1:])), list(devices))

    return jax.tree_util.tree_map(split, tree)


class DevicePrefetcher:
    """Iterates ``(host_sample, device_data)``: host samples (with ``.data``) pulled from
    ``iterator`` on a background thread, their data sharded over ``devices`` there."""

    def __init__(self, iterator: Iterator, devices: Sequence[jax.Device], buffer_size: int = 2,
                 timeout_s: float = 120.0) -> None:
        self._iterator, self._devices, self._timeout_s = iterator, list(devices), timeout_s
        self._what = f"replay table '{getattr(iterator, 'table', '?')}'"
        self._queue: queue.Queue = queue.Queue(maxsize=buffer_size)
        self._delivering = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._fill, name="device-prefetch", daemon=True)
        self._thread.start()

    def _fill(self) -> None:
        try:
            while not self._stop.is_set():
                sample = next(self._iterator)
                self._delivering = True  # served by replay; on its way to the devices
                self._put((sample, shard(sample.data, self._devices)))
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
        return self._delivering or not self._queue.empty()

    def __iter__(self) -> "DevicePrefetcher":
        return self

    def __next__(self) -> tuple[Any, Any]:
        try:
            item = self._queue.get(timeout=self._timeout_s)
        except queue.Empty:
            raise TimeoutError(
                f"waited {self._timeout_s}s for a batch from {self._what} (is anything inserting? "
                "the table's rate limiter holds sampling back until enough items arrived)") from None
        if isinstance(item, BaseException):
            raise RuntimeError(f"sampling from {self._what} failed: {item!r}") from item
        return item

    def close(self) -> None:
        """Stops the thread (an iterator with a ``close`` is closed, so a blocked ``next`` ends)."""
        self._stop.set()
        if callable(getattr(self._iterator, "close", None)):
            self._iterator.close()


class ReplicatedLearner(Learner):
    """Runs an agent's update function over host batches, data-parallel on all local devices.

    Args:
      state: the initial training state (a pytree with a ``params`` field or key).
      update: ``update(state, batch) -> (state, UpdateOutput)`` on one device's shard.
      iterator: yields host ``Sample``s (``.data`` with the batch axis leading, ``.keys``).
      devices: where to replicate (default ``jax.local_devices()``).
      after_update: optional host hook ``fn(sample, aux)`` after each update (``aux`` as device
        arrays ``[num_devices, ...]``), e.g. writing priorities back to replay.
      keep_batch: optional ``fn(sample, version) -> bool``, asked before each update with the
        learner's current version: ``False`` skips the batch (not trained on, no new version).
        An agent's rule, e.g. PPO's: drop rollouts acted with params too many versions old. If
        it has a ``metrics()`` method, its values join the learner's log rows.
      counter / logger: ``learner_steps`` (SGD steps) are counted; metrics logged once a second.
      stopwatch: times ``sample_wait`` and ``sgd_update`` (a single-process run passes the one
        its whole thread shares).
    """

    def __init__(self, state: Any, update: UpdateFn, iterator: Iterator, *,
                 devices: Sequence[jax.Device] | None = None,
                 after_update: Callable[[Any, Any], None] | None = None,
                 keep_batch: Callable[[Any, int], bool] | None = None, counter: Counter | None = None,
                 logger: Logger | None = None, stopwatch: Stopwatch | None = None, prefetch: int = 2) -> None:
        self._devices = list(devices or jax.local_devices())
        self._state = replicate(state, self._devices)
        self._static_sgd_steps: int | None = None

        def replicated_update(state, batch):
            state, out = update(state, batch)
            if isinstance(out.sgd_steps, int):  # known when tracing: step() need not wait to read it
                self._static_sgd_steps = out.sgd_steps
            return state, out

        self._update = jax.pmap(replicated_update, axis_name=AXIS_NAME, devices=self._devices,
                                donate_argnums=(0,))
        self._batches = DevicePrefetcher(iterator, self._devices, buffer_size=prefetch)
        self._after_update, self._keep_batch = after_update, keep_batch
        self._counter = counter or Counter()
        self._logger = logger or NoOpLogger()
        self._lock = threading.Lock()
        self._version = 0
        self._pending_params = None
        self._host_params = jax.device_get(_params_of(state))
        self._last_log = time.monotonic()
        self.stopwatch = stopwatch or Stopwatch()
        self._logged_seconds, self._logged_at = {}, self._last_log
        self._checked_metrics = False
        self._unchecked: tuple[Any, Any] | None = None  # (metrics, host sample) of the last update

    @property
    def version(self) -> int:
        """Number of updates so far: the version ``get_variables`` serves."""
        return self._version

    @property
    def num_devices(self) -> int:
        return len(self._devices)

    def ready(self) -> bool:
        return self._batches.ready()

    def _start_host_copy(self) -> Any:
        """Device 0's params, with their copy to the host started (no wait, no device op)."""
        params = jax.tree_util.tree_map(lambda x: x.addressable_shards[0].data, _params_of(self._state))
        for leaf in jax.tree_util.tree_leaves(params):
            leaf.copy_to_host_async()
        return params

    def _materialize_locked(self) -> None:
        if self._pending_params is not None:
            self._host_params = jax.tree_util.tree_map(lambda x: np.asarray(x)[0], self._pending_params)
            self._pending_params = None

    def step(self) -> Mapping[str, Any]:
        with self.stopwatch.time("sample_wait"):
            sample, data = next(self._batches)
        if self._keep_batch is not None and not self._keep_batch(sample, self._version):
            return {"skipped_batch": 1}
        with self.stopwatch.time("sgd_update"):
            return self._step(sample, data)

    def _step(self, sample: Any, data: Any) -> Mapping[str, Any]:
        with self._lock:  # the update donates the old state's buffers: copy params out first
            self._materialize_locked()
        self.check_finite()  # the previous update: finished by now, so reading it costs no wait
        self._state, out = self._update(self._state, data)
        self._unchecked = (out.metrics, sample)
        if not self._checked_metrics:
            self._check_metrics(out.metrics)
        if self._after_update is not None:
            self._after_update(sample, out.aux)
        sgd_steps = self._static_sgd_steps
        if sgd_steps is None:  # a data-dependent count: read it (waits for the update)
            sgd_steps = int(np.asarray(out.sgd_steps)[0])
        pending = self._start_host_copy()
        with self._lock:
            self._pending_params = pending
            self._version += 1
        counts = self._counter.increment(learner_steps=sgd_steps)
        now = time.monotonic()
        if now - self._last_log >= 1.0:  # metrics are read (a device sync) once a second
            self._last_log = now
            row = {**counts, **{k: float(v[0]) for k, v in jax.device_get(dict(out.metrics)).items()}}
            seconds = self.stopwatch.snapshot()
            row.update({f"time_{k}": v for k, v in breakdown(
                {k: v - self._logged_seconds.get(k, 0.0) for k, v in seconds.items()}, now - self._logged_at).items()})
            self._logged_seconds, self._logged_at = seconds, now
            row.update(getattr(self._keep_batch, "metrics", dict)())
            self._logger.write(row)
        return out.metrics

    def check_finite(self) -> None:
        """Raises ``FloatingPointError`` if the last update's loss (or any metric) is NaN or
        infinite, naming the update and the statistics of the batch that produced it. (Checked
        one update late, when reading the value no longer waits for the device.)"""
        if self._unchecked is None:
            return
        metrics, sample = self._unchecked
        self._unchecked = None
        values = {k: float(v[0]) for k, v in jax.device_get(dict(metrics)).items()}
        bad = {k: v for k, v in values.items() if not np.isfinite(v)}
        if bad:
            raise FloatingPointError(
                f"learner update {self._version} (after {self._counter.get_counts().get('learner_steps', 0):.0f} "
                f"SGD steps) produced non-finite {bad}; its batch: {batch_statistics(sample.data)}")

    def warm_up(self, example: Any) -> None:
        """Compiles the update for batches like the host ``Sample`` ``example`` by running it once
        on a copy of the state (the result is discarded; nothing is counted or logged), so that
        the first real update does not wait for the compiler."""
        copy = jax.tree_util.tree_map(lambda x: x.copy(), self._state)
        jax.block_until_ready(self._update(copy, shard(example.data, self._devices)))

    def _check_metrics(self, metrics: Mapping[str, jax.Array]) -> None:
        for name, value in metrics.items():
            if value.shape != (self.num_devices,):
                raise ValueError(
                    f"update metric {name!r} has shape {value.shape[1:]} per device; metrics "
                    "must be scalars (reduce them, and average over devices with lax.pmean; "
                    "return per-example values as UpdateOutput.aux)")
        self._checked_metrics = True

    def get_variables(self, known_version: int = -1) -> tuple[int, Any]:
        with self._lock:
            if known_version == self._version:
                return self._version, None
            self._materialize_locked()  # once per version, not per call
            return self._version, self._host_params

    @property
    def state(self) -> Any:
        """The training state of device 0, on the host."""
        return jax.device_get(jax.tree_util.tree_map(lambda x: x[0], self._state))

    def save(self) -> Any:
        return {"state": self.state, "version": self._version}

    def restore(self, saved: Any) -> None:
        # Copies owned by XLA: a device_put of a host array may alias its memory on a CPU, and the
        # update donates the state's buffers (a donated alias of numpy memory corrupted the heap).
        owned = jax.tree_util.tree_map(lambda x: jax.numpy.array(x, copy=True), saved["state"])
        self._state = replicate(owned, self._devices)
        with self._lock:
            self._version = int(saved["version"])
            self._pending_params = self._start_host_copy()

    def close(self) -> None:
        self._batches.close()


def batch_statistics(data: Any) -> str:
    """``name: min/mean/max (n non-finite)`` of every numeric field of a host batch."""
    parts = []
    for path, x in jax.tree_util.tree_flatten_with_path(data)[0]:
        x = np.asarray(x)
        if x.size and np.issubdtype(x.dtype, np.number):
            finite = x[np.isfinite(x)] if np.issubdtype(x.dtype, np.floating) else x
            name = "/".join(str(getattr(k, "key", k)) for k in path)
            stats = f"{finite.min():.3g}/{finite.mean():.3g}/{finite.max():.3g}" if finite.size else "-"
            parts.append(f"{name}: {stats} ({x.size - finite.size} non-finite)")
    return "; ".join(parts)


def _params_of(state: Any) -> Any:
    return state["params"] if isinstance(state, Mapping) else state.params
