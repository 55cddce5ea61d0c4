"""The SGD learner skeleton: replicated state, a pmap-ed multi-step update, a host param cache.

An agent supplies ``sgd_step(state, batch) -> (state, metrics)`` written for ONE device's
shard of ONE batch. Inside it, gradients must be averaged across devices with
``jax.lax.pmean(grads, AXIS_NAME)`` (the all-reduce of synchronous data parallelism, as in
Horovod / TF-Replicator). The skeleton then runs

    update = pmap(lambda state, batches: lax.scan(sgd_step, state, batches), AXIS_NAME)

on data laid out ``[num_devices, steps, batch/num_devices, ...]``, i.e. ``steps`` SGD steps per
dispatch. The state stays replicated on every local device. After each update the copy of
device 0's params to the host is started (asynchronously, so the update is not waited for), and
``get_variables`` serves that host copy, materialized once per version, with the version.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Iterator, Mapping

import jax
import numpy as np

from shoal.core.counting import Counter
from shoal.core.interfaces import Learner
from shoal.core.loggers import Logger, NoOpLogger

AXIS_NAME = "devices"

SGDStep = Callable[[Any, Mapping[str, jax.Array]], tuple[Any, Mapping[str, jax.Array]]]


def replicate(tree: Any, devices) -> Any:
    return jax.device_put_replicated(tree, devices)


def unreplicate(tree: Any) -> Any:
    return jax.tree_util.tree_map(lambda x: x[0], tree)


class SGDLearner(Learner):
    """Runs ``sgd_step`` over batches from ``iterator`` on all local devices.

    Args:
      state: the initial training state (a pytree; must have a ``params`` attribute/key).
      sgd_step: one SGD step on one device's shard (see the module docstring).
      iterator: yields objects with a ``data`` attribute (a dict of sharded device arrays)
        such as ``shoal.replay.Sample``.
      devices: the devices to replicate on (default ``jax.local_devices()``).
      after_update: optional ``fn(sample, metrics)`` run on the host after each update, e.g.
        writing priorities back to replay. ``metrics`` are then device arrays ``[nd, steps, ...]``.
      counter / logger: ``learner_steps`` (SGD steps) are counted; scalar metrics logged.
    """

    def __init__(self, state: Any, sgd_step: SGDStep, iterator: Iterator, *, devices=None,
                 after_update: Callable[[Any, Any], None] | None = None,
                 counter: Counter | None = None, logger: Logger | None = None) -> None:
        self._devices = list(devices or jax.local_devices())
        self._state = replicate(state, self._devices)
        self._iterator = iterator
        self._after_update = after_update
        self._counter = counter or Counter()
        self._logger = logger or NoOpLogger()

        def multi_step(state, batches):
            state, metrics = jax.lax.scan(sgd_step, state, batches)
            return state, metrics

        self._update = jax.pmap(multi_step, axis_name=AXIS_NAME, devices=self._devices,
                                donate_argnums=(0,))
        self._lock = threading.Lock()
        self._version = 0
        self._pending_params = None
        self._host_params = jax.device_get(_params_of(state))
        self._sgd_steps = 0
        self._last_log = time.monotonic()

    def _start_host_copy(self) -> Any:
        """Device 0's params, with their copy to the host started (no wait, no device op)."""
        params = jax.tree_util.tree_map(lambda x: x.addressable_shards[0].data,
                                        _params_of(self._state))
        for leaf in jax.tree_util.tree_leaves(params):
            leaf.copy_to_host_async()
        return params

    @property
    def version(self) -> int:
        """Number of updates so far: the version ``get_variables`` serves."""
        return self._version

    @property
    def num_devices(self) -> int:
        return len(self._devices)

    def _materialize_locked(self) -> None:
        if self._pending_params is not None:
            self._host_params = jax.tree_util.tree_map(lambda x: np.asarray(x)[0], self._pending_params)
            self._pending_params = None

    def step(self) -> Mapping[str, float]:
        sample = next(self._iterator)
        with self._lock:  # the update donates the old state's buffers: copy params out first
            self._materialize_locked()
        self._state, metrics = self._update(self._state, sample.data)
        if self._after_update is not None:
            self._after_update(sample, metrics)
        steps = int(jax.tree_util.tree_leaves(sample.data)[0].shape[1])
        self._sgd_steps += steps
        pending = self._start_host_copy()
        with self._lock:
            self._pending_params = pending
            self._version += 1
        counts = self._counter.increment(learner_steps=steps)
        now = time.monotonic()
        if now - self._last_log >= 1.0:  # scalar metrics are read (a device sync) once a second
            self._last_log = now
            per_step = {k: v for k, v in metrics.items() if v.ndim <= 2}  # [devices, steps]
            scalars = {k: float(np.mean(v)) for k, v in jax.device_get(per_step).items()}
            self._logger.write({**counts, **scalars})
        return metrics

    def get_variables(self, known_version: int = -1) -> tuple[int, Any]:
        with self._lock:
            if known_version == self._version:
                return self._version, None
            self._materialize_locked()  # once per version, not per call
            return self._version, self._host_params

    @property
    def state(self) -> Any:
        """The training state of device 0, on the host."""
        return jax.device_get(unreplicate(self._state))

    def save(self) -> Any:
        return {"state": self.state, "version": self._version, "sgd_steps": self._sgd_steps}

    def restore(self, saved: Any) -> None:
        self._state = replicate(saved["state"], self._devices)
        self._sgd_steps = int(saved["sgd_steps"])
        with self._lock:
            self._version = int(saved["version"])
            self._pending_params = self._start_host_copy()


def _params_of(state: Any) -> Any:
    return state["params"] if isinstance(state, Mapping) else state.params
