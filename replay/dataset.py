"""Replay items -> sharded device batches, prefetched on a background thread.

Each learner update consumes ``steps_per_update`` SGD batches of ``batch_size`` transitions.
One Reverb fetch samples ``steps_per_update * items_per_batch`` items (``items_per_batch =
ceil(batch_size / num_envs)``), flattens each item's ``num_envs`` transitions, keeps the first
``batch_size`` of each group, and lays the result out as

    [num_devices, steps_per_update, batch_size // num_devices, ...]

which is what a ``pmap``-ed ``lax.scan`` over SGD steps takes. The shards are ``device_put``
by the background thread, so the learner never waits on Python for data Reverb already has.
"""

from __future__ import annotations

import math
import queue
import threading
from typing import Any, NamedTuple, Sequence

import jax
import numpy as np
import reverb


def device_layout(x: np.ndarray, num_devices: int) -> np.ndarray:
    """``[steps, batch, ...]`` -> ``[num_devices, steps, batch // num_devices, ...]``.

    Device ``d`` gets transitions ``d*b .. (d+1)*b - 1`` of every step's batch (``b`` = batch
    per device), the layout a ``pmap`` over devices of a ``scan`` over steps consumes.
    """
    steps, batch = x.shape[:2]
    return np.swapaxes(x.reshape(steps, num_devices, batch // num_devices, *x.shape[2:]), 0, 1)


def put_sharded(batch: dict[str, np.ndarray], devices: Sequence[jax.Device]) -> dict[str, jax.Array]:
    """Host ``[steps, batch, ...]`` arrays -> device arrays in ``device_layout``, one shard each."""
    return {name: jax.device_put_sharded(list(device_layout(x, len(devices))), list(devices))
            for name, x in batch.items()}


class Sample(NamedTuple):
    """One learner update's data.

    data: dict of device arrays ``[num_devices, steps, batch/num_devices, ...]``: the transition
      fields plus ``probability`` and ``table_size`` (per transition, from its item).
    keys: host ``uint64 [steps, items_per_batch]`` Reverb keys of the sampled items.
    """

    data: dict[str, Any]
    keys: np.ndarray


class ShardedPrefetchIterator:
    """Iterates ``Sample``s from a transition table (see the module docstring)."""

    def __init__(self, server_address: str, table: str, *, batch_size: int,
                 num_envs: int | None = None, steps_per_update: int = 1, devices: Sequence[jax.Device] | None = None,
                 prefetch_size: int = 2, timeout_s: float = 120.0) -> None:
        self.devices = list(devices or jax.local_devices())
        num_devices = len(self.devices)
        if batch_size <= 0 or batch_size % num_devices:
            raise ValueError(
                f"batch_size={batch_size} must be a positive multiple of the number of local "
                f"devices ({num_devices}: {[str(d) for d in self.devices]})")
        self.batch_size = batch_size
        if num_envs is None:  # read off the table signature: items are [num_envs, ...]
            signature = reverb.Client(server_address).server_info(timeout=int(timeout_s))[table].signature
            num_envs = int(signature["reward"].shape[0])
        self.num_envs = num_envs
        self.steps = steps_per_update
        self.items_per_batch = math.ceil(batch_size / num_envs)
        self.items_per_sample = self.steps * self.items_per_batch
        self._table = table
        self._timeout_s = timeout_s
        dataset = reverb.TrajectoryDataset.from_table_signature(
            server_address, table, max_in_flight_samples_per_worker=2 * self.items_per_sample,
            get_signature_timeout_secs=int(timeout_s))
        dataset = dataset.batch(self.items_per_sample, drop_remainder=True)
        self._source = dataset.as_numpy_iterator()
        self._queue: queue.Queue = queue.Queue(maxsize=prefetch_size)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._fill, name=f"prefetch-{table}", daemon=True)
        self._thread.start()

    def _flatten_items(self, x: np.ndarray) -> np.ndarray:
        """Items ``[steps * items_per_batch, num_envs, ...]`` -> ``[steps, batch_size, ...]``."""
        x = x.reshape(self.steps, self.items_per_batch * self.num_envs, *x.shape[2:])
        return x[:, :self.batch_size]

    def _fill(self) -> None:
        try:
            while not self._stop.is_set():
                sample = next(self._source)
                per_item = {"probability": sample.info.probability.astype(np.float32),
                            "table_size": sample.info.table_size.astype(np.float32)}
                fields = dict(sample.data)
                for name, value in per_item.items():
                    fields[name] = np.repeat(value[:, None], self.num_envs, axis=1)
                data = put_sharded({k: self._flatten_items(v) for k, v in fields.items()}, self.devices)
                keys = sample.info.key.reshape(self.steps, self.items_per_batch)
                self._put(Sample(data, keys))
        except BaseException as e:  # noqa: BLE001 -- handed to the consumer, re-raised there
            if not self._stop.is_set():
                self._put(e)

    def _put(self, item) -> None:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def ready(self) -> bool:
        """True when ``next`` would return at once."""
        return not self._queue.empty()

    def __iter__(self):
        return self

    def __next__(self) -> Sample:
        try:
            item = self._queue.get(timeout=self._timeout_s)
        except queue.Empty:
            raise TimeoutError(
                f"waited {self._timeout_s}s for {self.items_per_sample} items from Reverb table "
                f"'{self._table}' (is anything inserting? the rate limiter blocks sampling until "
                "min_size items arrived and while samples run ahead of inserts)") from None
        if isinstance(item, BaseException):
            raise RuntimeError(f"replay sampling from '{self._table}' failed: {item!r}") from item
        return item

    def close(self) -> None:
        self._stop.set()
