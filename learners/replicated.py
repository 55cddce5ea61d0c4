"""The data-parallel learner. Every device-specific line of Shoal lives in this module and in
``shoal.learners.placement`` (the devices' mesh, and how the state and batches are placed).

``ReplicatedLearner`` keeps the training state on every one of the learner's devices (a one-axis
``Mesh`` named ``AXIS_NAME``) and runs the agent's update function on each device's share of
the batch::

    update = jit(shard_map(update_fn, mesh, in_specs=(P(), P(AXIS_NAME)),
                           out_specs=(P(), UpdateOutput(P(), P(), P(AXIS_NAME)))))

The state is replicated, host batches split along their leading axis (``Placement``).
``update_fn`` sees one device's rows and all-reduces its gradients by axis name (``lax.pmean``);
per-example outputs (``aux``) come back concatenated along the batch axis, in the host batch's
order.

Why ``jit(shard_map)`` and not ``pmap`` (which the project card names): JAX 0.10 removed the
placement ``pmap`` wanted (the functions that replicate or shard onto a list of devices, and
pmap's own sharding type), and from JAX 0.8 on ``pmap`` is itself implemented as
``jit(shard_map)``. Writing the latter directly, with the input shardings given to ``jit``,
keeps every call on JAX's C++ dispatch path on every version, needs no ``[devices,
batch/devices]`` reshape of batches, and returns per-example outputs in global batch order (no
agent decodes a device layout). The collectives (``pmean`` by axis name) are the same under
both. (JAX 0.4.34's ``shard_map`` miscompiled one pattern, a permutation computed outside a loop
and read inside it; ``shoal.learners.updates`` draws its permutations inside the loop, and the
2-device tests compare every agent's update with the 1-device one.)

The update never waits on Python: a background thread (``DevicePrefetcher``) pulls the next host
batches from replay while the current update runs (and places them, with ``place_ahead``;
otherwise the compiled update places its host batch itself); the parameters are not donated
to the update, so the previous version stays readable while the next one is computed and
``get_variables`` copies a version to the host only when asked (once per version); the NaN
check of each update's metrics reads them once they are ready, without waiting
(``shoal.learners.update_checks``); and the agent's host-side hook (e.g. DQN's priority writes)
runs on a thread of its own (both threads are in ``shoal.learners.background``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from shoal.core.counting import Counter
from shoal.core.interfaces import Dataset, Learner
from shoal.core.loggers import Logger, NoOpLogger
from shoal.core.timing import Stopwatch, breakdown
from shoal.core.types import Batch, Params, Sample, TrainState
from shoal.learners.background import DevicePrefetcher, HostHook
from shoal.learners.packing import pack, packs_batches, unpacked
from shoal.learners.placement import Placement, owned, shard_map
from shoal.learners.update_checks import InFlightUpdates, check_metric_shapes
from shoal.learners.updates import AXIS_NAME, UpdateFn, UpdateOutput

__all__ = ["AXIS_NAME", "DevicePrefetcher", "Placement", "ReplicatedLearner"]

MAX_IN_FLIGHT = 4  # updates whose NaN check is read in one go (step() waits once 2x are unchecked)


class ReplicatedLearner(Learner):
    """Runs an agent's update function over host batches, data-parallel on the learner's devices.

    Args:
      state: the initial training state (a pytree with a ``params`` field or key: what
        ``get_variables`` serves).
      update: ``update(state, batch) -> (state, UpdateOutput)`` on one device's rows (see
        ``shoal.learners.updates``).
      dataset: the ``Dataset`` of host ``Sample``s (``.data`` with the batch axis leading,
        ``.keys``); a plain iterator of samples is taken as an ``IteratorDataset`` (``as_dataset``).
      devices: where to replicate (default ``jax.local_devices()``: a GPU if there is one).
      after_update: optional host hook ``fn(sample, aux)`` after each update, ``aux`` (device
        arrays) in the host batch's order, e.g. writing priorities back to replay. It runs on a
        background thread, in update order.
      keep_batch: optional ``fn(sample, version) -> bool``, asked before each update with the
        learner's current version: ``False`` skips the batch (not trained on, no new version).
        An agent's rule, e.g. PPO's: drop rollouts acted with params too many versions old. If
        it has a ``metrics()`` method, its values join the learner's log rows.
      counter / logger: ``learner_steps`` (SGD steps) are counted; metrics logged once a second.
      stopwatch: times ``sample_wait`` and ``sgd_update`` (a single-process run passes the one
        its whole thread shares).
      prefetch / place_ahead: host batches the background thread keeps ready, and whether it
        also places them on the devices (``False``: the compiled update takes the host batch and
        places it itself, in C++ -- on 2 CPU cores here, and in an H100 measurement, faster than
        placing from a Python thread, which competes for the interpreter lock).

    On accelerators each host batch is packed (``shoal.learners.packing``): its fields' bytes in
    one array, one transfer to the devices, taken apart inside the compiled update
    (``SHOAL_PACK_BATCHES=1|0`` says otherwise; ``packs_batches``).
    """

    def __init__(
        self,
        state: Any,
        update: UpdateFn,
        dataset: Dataset,
        *,
        devices: Sequence[jax.Device] | None = None,
        after_update: Callable[[Any, Any], None] | None = None,
        keep_batch: Callable[[Any, int], bool] | None = None,
        counter: Counter | None = None,
        logger: Logger | None = None,
        stopwatch: Stopwatch | None = None,
        prefetch: int = 2,
        place_ahead: bool = False,
    ) -> None:
        self._place = Placement(devices or jax.local_devices())
        params, rest = _split(state)
        self._params, self._rest = self._place.replicate(owned(params)), self._place.replicate(owned(rest))
        self._static_sgd_steps: int | None = None

        def step_fn(
            params: Params, rest: TrainState, batch: Batch
        ) -> tuple[Params, TrainState, UpdateOutput, jax.Array]:
            new_state, out = update(_join(rest, params), unpacked(batch))
            if isinstance(out.sgd_steps, int):  # known when tracing: step() need not read it back
                self._static_sgd_steps = out.sgd_steps
            finite = jnp.all(jnp.asarray([jnp.all(jnp.isfinite(m)) for m in jax.tree_util.tree_leaves(out.metrics)]))
            return (*_split(new_state), out._replace(sgd_steps=jnp.asarray(out.sgd_steps, jnp.int32)), finite)

        specs = (P(), P(), UpdateOutput(P(), P(), P(AXIS_NAME)), P())  # type: ignore[arg-type]  # (a tree of specs)
        # The params are not donated: the version before stays readable (by get_variables, from
        # another thread) while the next one is computed.
        place = self._place
        self._update = jax.jit(
            shard_map(step_fn, place.mesh, (P(), P(), P(AXIS_NAME)), specs),
            in_shardings=(place.replicated, place.replicated, place.split),
            donate_argnums=(1,),
        )
        self._host_batch = pack if packs_batches(place.devices) else (lambda data: data)
        placed = place.shard if place_ahead else place.check

        def prepare(data: Batch) -> Any:  # what the update is given, as a batch
            return placed(self._host_batch(data))

        self._prepare = prepare
        self._batches = DevicePrefetcher(dataset, self._prepare, buffer_size=prefetch)
        self._hook = HostHook(after_update) if after_update is not None else None
        self._keep_batch = keep_batch
        self._counter = counter or Counter()
        self._logger = logger or NoOpLogger()
        self.stopwatch = stopwatch or Stopwatch()
        self._lock = threading.Lock()
        self._version = 0
        self._host: tuple[int, Any] = (0, jax.device_get(params))
        self._in_flight = InFlightUpdates(MAX_IN_FLIGHT)  # dispatched, their NaN check not done yet
        self._last_log = self._logged_at = time.monotonic()
        self._logged_seconds: dict[str, float] = {}
        self._unlogged: tuple[Mapping[str, float], Mapping[str, jax.Array]] | None = None
        self._checked_shapes = False

    @property
    def version(self) -> int:
        """Number of updates so far: the version ``get_variables`` serves."""
        return self._version

    @property
    def num_devices(self) -> int:
        return len(self._place.devices)

    def ready(self) -> bool:
        return self._batches.ready()

    def step(self) -> Mapping[str, Any]:
        with self.stopwatch.time("sample_wait"):
            sample, data = next(self._batches)
        if self._keep_batch is not None and not self._keep_batch(sample, self._version):
            return {"skipped_batch": 1}
        with self.stopwatch.time("sgd_update"):
            return self._step(sample, data)

    def _step(self, sample: Any, data: Any) -> Mapping[str, Any]:
        self._in_flight.check_finished()
        donated = self._rest  # (kept until the update is checked: see update_checks)
        params, self._rest, out, finite = self._update(self._params, donated, data)
        with self._lock:
            self._params, self._version = params, self._version + 1
        if not self._checked_shapes:
            check_metric_shapes(out.metrics)
            self._checked_shapes = True
        if self._hook is not None:
            self._hook.put(sample, out.aux)
        sgd_steps = self._static_sgd_steps
        if sgd_steps is None:  # a data-dependent count: read it (waits for the update)
            sgd_steps = int(out.sgd_steps)
        counts = self._counter.increment(learner_steps=sgd_steps)
        self._in_flight.add(self._version, counts.get("learner_steps", 0), finite, out.metrics, sample, donated)
        if time.monotonic() - self._last_log >= 1.0:  # metrics are read (a device sync) once a second
            self._log(counts, out.metrics)
        else:
            self._unlogged = (counts, out.metrics)  # logged by check_finite if no later update is
        return out.metrics

    def _log(self, counts: Mapping[str, float], metrics: Mapping[str, jax.Array]) -> None:
        now = time.monotonic()
        row = {**counts, **{k: float(v) for k, v in jax.device_get(dict(metrics)).items()}}
        seconds = self.stopwatch.snapshot()
        row.update(
            {
                f"time_{k}": v
                for k, v in breakdown(
                    {k: v - self._logged_seconds.get(k, 0.0) for k, v in seconds.items()}, now - self._logged_at
                ).items()
            }
        )
        self._logged_seconds, self._logged_at, self._last_log = seconds, now, now
        self._unlogged = None
        row.update(getattr(self._keep_batch, "metrics", dict)())
        self._logger.write(row)

    def check_finite(self) -> None:
        """Raises ``FloatingPointError`` if an update's loss (or any metric) was NaN or infinite,
        naming the update and the statistics of the batch that produced it. Updates are checked
        as they finish (without waiting for them); this waits for the ones still running.

        Then it logs the last update's row if the once-a-second log skipped it, so that a learner's
        log always ends with its final update (a run shorter than a second still has one row)."""
        self._in_flight.check_all()
        if self._unlogged is not None:
            self._log(*self._unlogged)

    def placed(self, data: Batch) -> Any:
        """The host batch ``data`` on the devices as the compiled update takes it (packed, where
        this learner packs batches): e.g. to time the update on a batch already there."""
        return self._place.shard(self._host_batch(data))

    def warm_up(self, example: Sample) -> None:
        """Compiles the update for batches like the host ``Sample`` ``example`` by running it once
        on a copy of the state (the result is discarded; nothing is counted or logged), so that
        the first real update does not wait for the compiler."""
        rest = jax.tree_util.tree_map(lambda x: x.copy(), self._rest)  # (donated)
        jax.block_until_ready(self._update(self._params, rest, self._prepare(example.data)))

    def get_variables(self, known_version: int = -1) -> tuple[int, Any]:
        with self._lock:
            version, params, host = self._version, self._params, self._host
        if known_version == version:
            return version, None
        if host[0] != version:  # copied to the host once per version (waits for that update only)
            host = (version, jax.device_get(params))
            with self._lock:
                if host[0] > self._host[0]:
                    self._host = host
        return host

    @property
    def state(self) -> Any:
        """The training state, on the host."""
        return jax.device_get(_join(self._rest, self._params))

    def save(self) -> Any:
        return {"state": self.state, "version": self._version}

    def restore(self, saved: Any) -> None:
        params, rest = _split(saved["state"])
        self._params, self._rest = self._place.replicate(owned(params)), self._place.replicate(owned(rest))
        with self._lock:
            self._version = int(saved["version"])
            self._host = (self._version, jax.device_get(params))

    def close(self) -> None:
        self._batches.close()
        if self._hook is not None:
            self._hook.close()


def _split(state: TrainState) -> tuple[Params, TrainState]:
    """``(params, the rest of the state)`` (the rest has ``params`` set to ``None``)."""
    if isinstance(state, Mapping):
        return state["params"], {**state, "params": None}
    return state.params, state._replace(params=None)


def _join(rest: TrainState, params: Params) -> TrainState:
    return {**rest, "params": params} if isinstance(rest, Mapping) else rest._replace(params=params)
