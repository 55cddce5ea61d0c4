"""Replay items -> host batches (numpy). Device placement is the learner's job, not replay's.

Every batch is a ``Sample(data, keys)``: ``data`` a dict of numpy arrays whose *leading* axis is
the batch axis (the one a data-parallel learner splits across its devices), ``keys`` the replay
keys of the sampled items (for priority updates). One batch = one learner update:

* ``transition_batches``: ``[batch_size, num_steps, ...]`` transitions for ``num_steps``
  scanned SGD steps of ``batch_size`` each (column ``s`` is step ``s``'s batch), plus
  ``probability`` and ``table_size`` per transition; ``keys`` is ``[num_steps, items_per_batch]``.
  Items hold ``num_envs`` transitions: a batch is cut from ``ceil(batch_size / num_envs)`` items
  (the last may be partly used).
* ``sequence_batches``: ``[num_items * num_envs, length, ...]``, one row per env sequence
  (Reverb's time-major ``[length, num_envs]`` items are transposed); ``keys`` is ``[num_items]``.
* ``env_sequence_batches``: ``[batch_size, length, ...]``, one row per item (one env's
  sequence), plus its sampling ``probability`` ``[batch_size]``; ``keys`` is ``[batch_size]``.

Each function takes the replay client a builder is given (either backend; or a Reverb server's
address). On the **native** backend, ``next`` asks the server for the items still missing, at
most ``poll_s`` at a time, and the server returns what it could take: numpy from end to end, no
TensorFlow. Over RPC (a distributed run) the next batch's items are asked for as soon as the
last batch's came (one call ahead, as Reverb's dataset keeps samples in flight), except from a
queue, whose items are fetched only when needed (none lost).

On **Reverb**, an iterator opens Reverb's TensorFlow dataset at its first ``next`` (so a process imports
TensorFlow only once it samples: a learner node serves its parameters, and a one-process run
takes its first env steps, before). Iteration blocks until Reverb serves the items (the rate limiter decides when); the learner
reads it from a background thread (``shoal.learners``). Reverb's dataset is opened with a rate
limiter timeout, so a stream that waited ``poll_s`` for an item ends by itself (a new one is
opened, and items already served are kept for the batch): ``close()`` then takes effect within
``poll_s``, and no sampler is left blocked in the table for a destructor to wait on.

A stream that ends at that timeout drops the items its worker had fetched ahead (measured: 4 of
1,000 items of a queue written at random intervals around the timeout were sampled and never
delivered). Uniform or prioritized replay samples again, but a queue's item exists once: a lost
rollout is lost data, and a one-process on-policy run would wait for it forever. So
``each_item_once`` iterators (``sequence_batches``: PPO's and IMPALA's queues) fetch one item at
a time on one worker, and nothing is fetched ahead to drop (0 of 3,000 lost in the same test).
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import numpy as np
import tree

from shoal.core.interfaces import Dataset
from shoal.core.types import Sample
from shoal.replay.tables import transition_items_per_batch


class _SampleInfo(NamedTuple):  # (as Reverb's SampleInfo: one entry per item)
    key: np.ndarray
    probability: np.ndarray
    table_size: np.ndarray
    priority: np.ndarray
    times_sampled: np.ndarray


def _native_client(server: Any) -> Any:
    """The native replay client ``server`` is or names, else ``None`` (Reverb)."""
    if hasattr(server, "sample_batch"):
        return server
    if isinstance(server, str) and server.startswith("native://"):
        from shoal.replay.native.client import client_for

        return client_for(server)
    return None


class _Served(NamedTuple):  # items Reverb served: data and their SampleInfo, leading axis = items
    data: Any
    info: Any


class ReplayIterator(Dataset):
    """Samples ``items_per_update`` items of ``table`` per batch and lays them out with ``layout``
    (the ``Dataset`` a learner consumes). After ``close()``, ``next`` raises ``StopIteration``.
    ``each_item_once``: fetch nothing ahead (for a queue, whose items must not be lost: module
    docstring).

    ``server``: the replay client (either backend), or a Reverb server's address. On the native
    backend, each ``next`` asks the server for the items still missing, ``poll_s`` at a time
    (it returns those it could take: none is lost, and ``close()`` takes effect within ``poll_s``);
    no TensorFlow is involved."""

    def __init__(
        self,
        server: Any,
        table: str,
        items_per_update: int,
        num_envs: int,
        layout: Callable[[Any, Any], Sample],
        timeout_s: float = 120.0,
        poll_s: float = 0.5,
        each_item_once: bool = False,
    ) -> None:
        self.table, self.items_per_update, self.num_envs = table, items_per_update, num_envs
        self._layout = layout
        self._native = _native_client(server)
        server_address = server if isinstance(server, str) else server.server_address
        self._address, self._timeout_s, self._poll_s = server_address, timeout_s, poll_s
        self._ahead = (
            dict(max_in_flight_samples_per_worker=1, num_workers_per_iterator=1)
            if each_item_once
            else dict(max_in_flight_samples_per_worker=2 * items_per_update)
        )
        self._dataset = None  # (opened by the first next(): TensorFlow is imported then, not before)
        self._source: Any = None  # (an iterator of the open stream)
        self._served: list = []  # items served but not yet in a batch
        self._closed = False
        self._signature = None  # (native: the table's, read at the first sample)
        # (native over RPC: the next batch's items are asked for as soon as the last came, so the
        # server samples and sends them while this process uses the last one; as Reverb's
        # dataset keeps samples in flight. Not from a queue, whose items must not be lost, nor in
        # one process, where sampling is a direct call.)
        self._prefetch = self._native is not None and not self._native.in_process and not each_item_once
        self._next_part = None
        self._segment = None  # (native over RPC: shared memory with a server on this host, or False)

    def __next__(self) -> Sample:
        have = sum(len(part.info.key) for part in self._served)
        while have < self.items_per_update:
            if self._closed:
                self._source = self._dataset = None  # (Reverb's stream and its threads: released here, by their user)
                if self._segment:
                    segment, self._segment = self._segment, False
                    self._native.release_segment(segment)
                raise StopIteration
            if self._native is not None:
                part = self._native_part(self.items_per_update - have)
                if part is not None:
                    self._served.append(part)
                    have += len(part.info.key)
                continue
            if self._source is None:
                self._source = (self._dataset or self._open()).as_numpy_iterator()
            try:
                part = next(self._source)
            except StopIteration:  # the stream waited poll_s for an item: open a new one
                self._source = None
                continue
            self._served.append(part)
            have += len(part.info.key)
        data, info = _concatenate(self._served)
        n = self.items_per_update
        if have == n:  # (the usual case: one batch served whole, nothing to cut)
            self._served = []
            return self._layout(data, info)
        self._served = [_Served(*_slice(data, info, n, have))]
        return self._layout(*_slice(data, info, 0, n))

    def _native_part(self, num_items: int) -> _Served | None:
        if self._next_part is not None:  # (asked for while the last batch was laid out and used)
            served, self._next_part = self._next_part(), None
        else:
            served = self._native.sample_batch(self.table, num_items, self._poll_s, self._segment or None)
        if served is not None and self._segment is None:
            self._segment = self._shared_segment(served["columns"], len(served["key"]))
        if self._prefetch:
            self._next_part = self._native.sample_batch_later(
                self.table, self.items_per_update, self._poll_s, self._segment or None
            )
        if served is None:
            return None
        if self._signature is None:
            self._signature = self._native.signature(self.table)
        info = _SampleInfo(
            served["key"], served["probability"], served["table_size"], served["priority"], served["times_sampled"]
        )
        return _Served(tree.unflatten_as(self._signature, list(served["columns"])), info)

    def _shared_segment(self, columns: list, num_items: int) -> Any:
        """(Native over RPC, the server on this host) a shared-memory segment for a batch's
        columns (``shoal.core.shared_memory``), if they are large enough to gain from one;
        else ``False`` (asked once)."""
        from shoal.replay.native.client import SHARED_MIN_BYTES
        from shoal.core.shared_memory import ALIGN

        if not self._native.shared_memory:
            return False
        per_batch = [c.nbytes // num_items * self.items_per_update for c in columns]
        size = sum(-(-n // ALIGN) * ALIGN for n in per_batch)
        return (self._native.shared_segment(size) or False) if size >= SHARED_MIN_BYTES else False

    def _open(self) -> Any:
        """Reverb's TensorFlow dataset of the table (the import of TensorFlow happens here)."""
        import reverb
        import tensorflow as tf

        dataset = reverb.TrajectoryDataset.from_table_signature(
            self._address,
            self.table,
            **self._ahead,
            get_signature_timeout_secs=int(self._timeout_s),
            rate_limiter_timeout_ms=int(self._poll_s * 1000),
        ).batch(self.items_per_update, drop_remainder=False)
        # No tf.data autotuning: nothing here to tune, and its model thread sleeps for growing
        # periods that an iterator's destructor waits out (seconds, at an arbitrary later GC).
        options = tf.data.Options()
        options.autotune.enabled = False
        self._dataset = dataset.with_options(options)
        return self._dataset

    def close(self) -> None:
        """Stops iterating (within ``poll_s``) and releases the Reverb stream."""
        self._closed = True

    def example(self) -> Sample:
        """A batch of zeros shaped like the real ones (from the table's signature), sampling
        nothing (on Reverb it imports TensorFlow; an agent's ``example_batch`` gives the same without)."""
        n = self.items_per_update
        if self._native is not None:
            signature = self._native.signature(self.table)
            data = tree.map_structure(lambda spec: np.zeros((n, *spec.shape), spec.dtype), signature)
            info = _SampleInfo(
                np.zeros(n, np.uint64), np.ones(n), np.ones(n, np.int64), np.ones(n), np.ones(n, np.int32)
            )
            return self._layout(data, info)
        import reverb

        signature = reverb.Client(self._address).server_info(timeout=int(self._timeout_s))[self.table].signature
        n = self.items_per_update
        data = tree.map_structure(lambda spec: np.zeros((n, *spec.shape), spec.dtype.as_numpy_dtype), signature)
        info = reverb.replay_sample.SampleInfo(
            key=np.zeros(n, np.uint64),
            probability=np.ones(n),
            table_size=np.ones(n, np.int64),
            priority=np.ones(n),
            times_sampled=np.ones(n, np.int32),
        )
        return self._layout(data, info)


def _concatenate(parts: list) -> tuple[Any, Any]:
    if len(parts) == 1:
        return parts[0].data, parts[0].info
    join = lambda *xs: np.concatenate(xs)  # noqa: E731
    return (tree.map_structure(join, *[p.data for p in parts]), tree.map_structure(join, *[p.info for p in parts]))


def _slice(data: Any, info: Any, start: int, stop: int):
    cut = lambda x: x[start:stop]  # noqa: E731
    return tree.map_structure(cut, data), tree.map_structure(cut, info)


def transition_batches(
    server: Any, table: str, *, num_envs: int, batch_size: int, num_steps: int = 1
) -> ReplayIterator:
    """Batches of ``[batch_size, num_steps, ...]`` transitions (see the module docstring)."""
    items_per_batch = transition_items_per_batch(batch_size, num_envs)

    def layout(data, info) -> Sample:
        def per_transition(x: np.ndarray) -> np.ndarray:
            # [steps * items, envs, ...] -> [steps, items * envs, ...] -> first batch_size -> [batch, steps, ...]
            x = x.reshape(num_steps, items_per_batch * num_envs, *x.shape[2:])[:, :batch_size]
            return np.swapaxes(x, 0, 1)

        fields = dict(data)
        for name in ("probability", "table_size"):
            fields[name] = np.repeat(getattr(info, name).astype(np.float32)[:, None], num_envs, axis=1)
        return Sample(tree.map_structure(per_transition, fields), info.key.reshape(num_steps, items_per_batch))

    return ReplayIterator(server, table, num_steps * items_per_batch, num_envs, layout)


def sequence_batches(server: Any, table: str, *, num_envs: int, num_items: int = 1) -> ReplayIterator:
    """Batches of ``[num_items * num_envs, length, ...]`` env sequences (see the module docstring),
    from a queue: each item is fetched once, none ahead (``each_item_once``)."""

    def layout(data, info) -> Sample:
        def per_sequence(x: np.ndarray) -> np.ndarray:
            # [items, length, envs, ...] -> [items, envs, length, ...] -> [items * envs, length, ...]
            x = np.swapaxes(x, 1, 2)
            return x.reshape(x.shape[0] * x.shape[1], *x.shape[2:])

        return Sample(tree.map_structure(per_sequence, data), info.key)

    return ReplayIterator(server, table, num_items, num_envs, layout, each_item_once=True)


def env_sequence_batches(server: Any, table: str, *, batch_size: int) -> ReplayIterator:
    """Batches of ``batch_size`` env sequences ``[batch_size, length, ...]`` and their sampling
    probabilities (see the module docstring), sampled by the table's selector."""

    def layout(data, info) -> Sample:
        return Sample({**data, "probability": info.probability.astype(np.float32)}, info.key)

    return ReplayIterator(server, table, batch_size, 1, layout)
