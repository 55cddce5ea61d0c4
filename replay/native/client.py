"""The native backend's client (its writer: ``shoal.replay.native.writer``, named here too).

``NativeReplayClient(service, address)`` calls a ``NativeReplayServer``'s methods on
``service``: the server object itself in one process (direct calls, no socket), or an RPC
client of it (``shoal.launch``'s replay node makes one; the RPC layer carries numpy arrays
without pickling). It is the native backend's ``shoal.replay.contract.ReplayClient``:
``server_address``, ``server_info``, ``writer``, ``sampler``, ``mutate_priorities``,
``checkpoint`` and ``sample``; ``sample_batch`` is what its sampler calls.

``writer`` makes a ``NativeWriter`` (``shoal.replay.native.writer``), what adders write through;
``sampler`` a ``NativeSampler`` (``shoal.replay.native.sampler``), what datasets read through.
"""

from __future__ import annotations

import collections
import concurrent.futures
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping
from types import SimpleNamespace
from typing import Any

import numpy as np
import tree

from shoal.core.shared_memory import Segment
from shoal.core.specs import ArraySpec
from shoal.replay.native.sampler import NativeSampler
from shoal.replay.native.table import ReplayClosed, ReplayServerGone
from shoal.replay.native.validation import MAX_SAMPLE_ITEMS
from shoal.replay.native.writer import (  # (named here too: where they were)
    RPC_BATCH,
    RPC_MAX_BYTES,
    RPC_MAX_ITEMS,
    SHARED_MIN_BYTES,
    SHARED_MIN_SIZE,
    NativeWriter,
)

SCHEME = "native://"
_CLIENTS: weakref.WeakValueDictionary[str, NativeReplayClient] = weakref.WeakValueDictionary()


def client_for(address: str) -> NativeReplayClient:
    """The client whose ``server_address`` is ``address`` (``native://...``), made in this process."""
    client = _CLIENTS.get(address)
    if client is None:
        raise ValueError(
            f"no native replay client for {address!r} in this process: pass the replay "
            "client itself to the dataset (builder.make_dataset_iterator's replay_client)"
        )
    return client


def _spec(record: Any) -> Any:
    if isinstance(record, dict):
        if set(record) == {"__array__"}:
            shape, dtype = record["__array__"]
            return ArraySpec(tuple(shape), np.dtype(dtype))
        return {k: _spec(v) for k, v in record.items()}
    if isinstance(record, (list, tuple)):
        return type(record)(_spec(v) for v in record)
    return record


def _info(record: Mapping[str, Any]) -> SimpleNamespace:
    """A table's info with the fields of Reverb's ``TableInfo`` that Shoal reads."""
    limiter = SimpleNamespace(
        samples_per_insert=record["samples_per_insert"],
        min_diff=record["min_diff"],
        max_diff=record["max_diff"],
        min_size_to_sample=record["min_size_to_sample"],
        insert_stats=SimpleNamespace(completed=record["inserts"]),
        sample_stats=SimpleNamespace(completed=record["samples"]),
    )
    return SimpleNamespace(
        name=record["name"],
        current_size=record["current_size"],
        max_size=record["max_size"],
        num_deleted_episodes=record["deletes"],
        rate_limiter_info=limiter,
    )


WRITES = frozenset({"insert", "insert_shared", "insert_items", "insert_items_shared"})
SENDER_IDLE_S = 2.0  # how long a client's sender thread waits for the next write before it ends


class _Sender:
    """The thread that makes a client's writes over RPC (``WRITES``), one at a time in the order
    given, with the RPC client's blocking call (``call_blocking``): a gRPC future would start a
    thread of its own to poll the channel for each call made while none is in flight (~0.2 ms of
    CPU a call, as much as the rest of a small insert). It ends after ``SENDER_IDLE_S`` without a
    write and starts again with the next."""

    def __init__(self, call: Callable[[str, tuple], Any]) -> None:
        self._call = call
        self._queue: collections.deque = collections.deque()
        self._ready = threading.Condition()
        self._running = False

    def submit(self, method: str, args: tuple) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()
        with self._ready:
            self._queue.append((future, method, args))
            self._ready.notify()
            if not self._running:
                self._running = True
                threading.Thread(target=self._run, name="shoal-replay-writes", daemon=True).start()
        return future

    def _run(self) -> None:
        while True:
            with self._ready:
                if not self._queue:
                    self._ready.wait(SENDER_IDLE_S)
                if not self._queue:
                    self._running = False
                    return
                future, method, args = self._queue.popleft()
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(self._call(method, args))
                except BaseException as e:  # noqa: BLE001 -- the caller's, raised where it waits
                    future.set_exception(e)


class _Pending:
    """A call under way: calling it waits for its result; ``done()`` says whether it is in."""

    def __init__(self, result: Callable[[], Any], done: Callable[[], bool]) -> None:
        self._result, self.done = result, done

    def __call__(self) -> Any:
        return self._result()


class NativeReplayClient:
    """``service``: the server itself (``in_process``) or an RPC client of it. ``shared_memory``
    (over RPC): send and take bulk arrays through a shared-memory segment when the server is on
    this host (``shoal.core.shared_memory``; RPC otherwise)."""

    backend = "native"

    def __init__(self, service: Any, address: str, in_process: bool = False, shared_memory: bool = False) -> None:
        self._service, self.in_process = service, in_process
        self.shared_memory = shared_memory and not in_process and Segment.available()
        self.server_address = SCHEME + address
        self._signatures: dict[str, Any] | None = None
        self._sender = _Sender(lambda method, args: self._service.call_blocking(method, *args))
        _CLIENTS[self.server_address] = self

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return self._settle(method, lambda: getattr(self._service, method)(*args, **kwargs))

    def _call_later(self, method: str, *args: Any) -> _Pending:
        """Starts ``method`` (over RPC: a future; in one process: at once) and returns what
        waits for its result (``_Pending``)."""
        if self.in_process:  # (the server itself: a direct call, done now)
            result = self._call(method, *args)
            return _Pending(lambda: result, lambda: True)
        if method in WRITES:  # (a writer's: on this client's sender thread, in order)
            sent = self._sender.submit(method, args)
            return _Pending(lambda: self._settle(method, sent.result), sent.done)
        future = self._settle(method, lambda: getattr(self._service.futures, method)(*args))
        return _Pending(lambda: self._settle(method, future.result), future.done)

    def _settle(self, method: str, call: Callable[[], Any]) -> Any:
        try:
            return call()
        except Exception as e:  # noqa: BLE001 -- an RPC failure: say which server, in one line
            code = getattr(getattr(e, "code", None), "name", None)
            if code in ("UNAVAILABLE", "CANCELLED"):
                raise ReplayServerGone(
                    f"the replay server at {self.server_address} went away during "
                    f"{method} ({code}): is the replay node running?"
                ) from None
            if f"raised {ReplayClosed.__module__}.{ReplayClosed.__name__}:" in str(getattr(e, "details", "")):
                raise ReplayClosed(
                    f"the replay server at {self.server_address} closed its tables during {method} (it is stopping)"
                ) from None
            raise

    def writer(self, num_keep_alive_refs: int, timeout_s: float = 120.0) -> NativeWriter:
        """A writer that keeps the last ``num_keep_alive_refs`` steps for its items."""
        if num_keep_alive_refs < 1:
            raise ValueError(f"num_keep_alive_refs ({num_keep_alive_refs}) must be a positive integer")
        return NativeWriter(self, num_keep_alive_refs, timeout_s)

    trajectory_writer = writer

    def sampler(
        self, table: str, items_per_update: int, *, timeout_s: float, poll_s: float, each_item_once: bool
    ) -> NativeSampler:
        """A sampler of ``table`` for a ``ReplayIterator`` (``shoal.replay.native.sampler``; each
        call waits at most ``poll_s``, so ``timeout_s`` has nothing to bound here)."""
        return NativeSampler(self, table, items_per_update, poll_s, each_item_once)

    def server_info(self, timeout: int | None = None) -> dict[str, SimpleNamespace]:
        """Each table's size, counts and ``signature``, with the fields of Reverb's
        ``TableInfo`` that Shoal reads."""
        infos = {name: _info(record) for name, record in self._call("server_info").items()}
        for name, info in infos.items():
            info.signature = self.signature(name)
        return infos

    def mutate_priorities(self, table: str, updates: Mapping[Any, float] | None = None, deletes: Any = None) -> None:
        updates = {int(k): float(v) for k, v in (updates or {}).items()}
        self._call("mutate_priorities", table, updates, [int(k) for k in (deletes if deletes is not None else [])])

    def checkpoint(self) -> str:
        return self._call("checkpoint")

    def signature(self, table: str) -> Any:
        """``table``'s signature (a nest of ``ArraySpec``)."""
        if self._signatures is None:
            self._signatures = {name: _spec(r) for name, r in self._call("table_signatures").items()}
        if table not in self._signatures:
            raise KeyError(
                f"replay table {table!r} is not served at {self.server_address}; tables: {', '.join(self._signatures)}"
            )
        return self._signatures[table]

    def sample_batch(
        self, table: str, num_items: int, timeout_s: float, segment: Segment | None = None
    ) -> dict[str, Any] | None:
        """Up to ``num_items`` items (``NativeReplayServer.sample``), ``None`` if none came in
        ``timeout_s``; their columns through ``segment`` (``shared_segment``) if given."""
        return self.sample_batch_later(table, num_items, timeout_s, segment)()

    def sample_batch_later(
        self,
        table: str,
        num_items: int,
        timeout_s: float,
        segment: Segment | None = None,
        min_items: int | None = None,
    ) -> _Pending:
        """``sample_batch`` started now (over RPC: while the caller goes on), its result later
        (``min_items``: the server waits for no more than these; ``NativeReplayServer.sample``).
        At most ``MAX_SAMPLE_ITEMS`` items come in one call (the server's bound): the caller asks
        again for the rest, as it does for the items a timeout held back."""
        num_items = min(int(num_items), MAX_SAMPLE_ITEMS)
        least = None if min_items is None else min(int(min_items), num_items)
        if segment is None:
            return self._call_later("sample", table, num_items, float(timeout_s), least)
        pending = self._call_later("sample_shared", table, num_items, float(timeout_s), segment.name, least)

        def result() -> dict[str, Any] | None:
            served = pending()
            if served is not None and served.get("places") is not None:
                served["columns"] = segment.copies(served.pop("places"))
            return served

        return _Pending(result, pending.done)

    def shared_segment(self, size: int) -> Segment | None:
        """A segment of ``size`` bytes the server has mapped, or ``None`` (no ``shared_memory``;
        the server is on another host: this client keeps to RPC from now on)."""
        if not self.shared_memory:
            return None
        segment = Segment(size)
        try:
            attached = self._call("attach_shared", segment.name, segment.size)
        except BaseException:
            segment.close()
            raise
        segment.unlink()  # (both sides keep their mappings; no file is left behind)
        if not attached:
            self.shared_memory = False
            segment.close()
            return None
        return segment

    def release_segment(self, segment: Segment) -> None:
        """The server unmaps ``segment``; then this process does."""
        try:
            self._call("detach_shared", segment.name)
        except Exception:  # noqa: BLE001 -- a server that is gone mapped nothing any more
            pass
        segment.close()

    def sample(
        self,
        table: str,
        num_samples: int = 1,
        *,
        emit_timesteps: bool = False,
        unpack_as_table_signature: bool = False,
        timeout_s: float = 60.0,
    ) -> Iterator[SimpleNamespace]:
        """``num_samples`` items of ``table``, one by one, for a look at what it holds (as
        ``reverb.Client.sample(..., emit_timesteps=False)``): each with ``info`` (``key``,
        ``probability``, ``table_size``, ``priority``, ``times_sampled``) and ``data`` (the item's
        columns, or its nest with ``unpack_as_table_signature``). A ``TimeoutError`` if the
        table's rate limiter held one back for ``timeout_s``."""
        left = num_samples
        while left > 0:
            served = self.sample_batch(table, left, timeout_s)
            if served is None:
                raise TimeoutError(f"replay table '{table}' served no item within {timeout_s}s")
            for i in range(len(served["key"])):
                data = [column[i] for column in served["columns"]]
                if unpack_as_table_signature:
                    data = tree.unflatten_as(self.signature(table), data)
                info = SimpleNamespace(
                    **{k: served[k][i] for k in ("key", "probability", "table_size", "priority", "times_sampled")}
                )
                yield SimpleNamespace(info=info, data=data)
            left -= len(served["key"])


__all__ = [
    "RPC_BATCH",
    "RPC_MAX_BYTES",
    "RPC_MAX_ITEMS",
    "SCHEME",
    "SHARED_MIN_BYTES",
    "SHARED_MIN_SIZE",
    "NativeReplayClient",
    "NativeWriter",
    "ReplayServerGone",
    "client_for",
]
