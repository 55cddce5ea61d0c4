"""The native backend's client and writer.

``NativeReplayClient(service, address)`` calls a ``NativeReplayServer``'s methods on
``service``: the server object itself in one process (direct calls, no socket), or an RPC
client of it (``shoal.launch``'s replay node makes one; the RPC layer carries numpy arrays
without pickling). It offers what Shoal calls on a replay client (``core.interfaces.ReplayClient``):
``server_address``, ``server_info``, ``trajectory_writer``, ``mutate_priorities``,
``checkpoint``, and ``sample_batch`` for the datasets.

``NativeWriter`` is what adders write through (as Reverb's ``TrajectoryWriter`` for the Reverb
backend): ``append(columns)`` keeps a step, ``create_item(table, priority, length)`` makes an
item of the last ``length`` steps, ``commit()`` ends a vector step's writes and ``flush()``
sends what is new in one ``insert`` call (each step once, however many items use it; over RPC,
``commit`` sends every ``RPC_BATCH`` items). Inserts wait for the table's rate limiter up to the
writer's timeout; then ``commit`` raises ``TimeoutError`` and keeps what was not inserted.
"""

from __future__ import annotations

import collections
import itertools
import os
import threading
import time
import weakref
from types import SimpleNamespace
from typing import Any, Callable, Iterator, Mapping

import numpy as np
import tree

from shoal.core.specs import ArraySpec
from shoal.replay.native.payload import groups as _groups
from shoal.replay.native.payload import indices as _indices
from shoal.replay.native.payload import item_payload as _item_payload
from shoal.replay.native.payload import layouts as _layouts
from shoal.replay.native.payload import stacked as _stacked
from shoal.replay.native.payload import stacked_groups
from shoal.replay.native.shared import Segment, footprint
from shoal.replay.native.table import ReplayClosed
from shoal.replay.native.validation import MAX_SAMPLE_ITEMS

SCHEME = "native://"
_CLIENTS: "weakref.WeakValueDictionary[str, NativeReplayClient]" = weakref.WeakValueDictionary()
_writer_ids = itertools.count()
RPC_BATCH = 8  # items a writer sends in one RPC at least (adders flush at least this often) ...
RPC_MAX_ITEMS = 512  # ... and at most, gathered while the call before is under way ...
RPC_MAX_BYTES = 32 << 20  # ... or until its steps hold this many bytes
SHARED_MIN_BYTES = 64 << 10  # a call's steps go through shared memory from this size (same host)
SHARED_MIN_SIZE = 4 << 20  # a writer's first segment (it grows to twice the largest call)


class ReplayServerGone(ConnectionError):
    """The replay server stopped answering (it stopped, crashed, or the network went away)."""


def client_for(address: str) -> "NativeReplayClient":
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


class _Pending:
    """A call under way: calling it waits for its result; ``done()`` says whether it is in."""

    def __init__(self, result: Callable[[], Any], done: Callable[[], bool]) -> None:
        self._result, self.done = result, done

    def __call__(self) -> Any:
        return self._result()


class NativeReplayClient:
    """``service``: the server itself (``in_process``) or an RPC client of it. ``shared_memory``
    (over RPC): send and take bulk arrays through a shared-memory segment when the server is on
    this host (``shoal.replay.native.shared``; RPC otherwise)."""

    def __init__(self, service: Any, address: str, in_process: bool = False, shared_memory: bool = False) -> None:
        self._service, self.in_process = service, in_process
        self.shared_memory = shared_memory and not in_process and Segment.available()
        self.server_address = SCHEME + address
        self._signatures: dict[str, Any] | None = None
        _CLIENTS[self.server_address] = self

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return self._settle(method, lambda: getattr(self._service, method)(*args, **kwargs))

    def _call_later(self, method: str, *args: Any) -> "_Pending":
        """Starts ``method`` (over RPC: a future; in one process: at once) and returns what
        waits for its result (``_Pending``)."""
        futures = getattr(self._service, "futures", None)
        if futures is None:
            result = self._call(method, *args)
            return _Pending(lambda: result, lambda: True)
        future = self._settle(method, lambda: getattr(futures, method)(*args))
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

    def writer(self, num_keep_alive_refs: int, timeout_s: float = 120.0) -> "NativeWriter":
        """A writer that keeps the last ``num_keep_alive_refs`` steps for its items."""
        if num_keep_alive_refs < 1:
            raise ValueError(f"num_keep_alive_refs ({num_keep_alive_refs}) must be a positive integer")
        return NativeWriter(self, num_keep_alive_refs, timeout_s)

    trajectory_writer = writer

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
        self, table: str, num_items: int, timeout_s: float, segment: Segment | None = None
    ) -> _Pending:
        """``sample_batch`` started now (over RPC: while the caller goes on), its result later. At
        most ``MAX_SAMPLE_ITEMS`` items come in one call (the server's bound): the caller asks
        again for the rest, as it does for the items a timeout held back."""
        num_items = min(int(num_items), MAX_SAMPLE_ITEMS)
        if segment is None:
            return self._call_later("sample", table, int(num_items), float(timeout_s))
        pending = self._call_later("sample_shared", table, int(num_items), float(timeout_s), segment.name)

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


class NativeWriter:
    """Steps and items for a native server (module docstring). Not thread-safe: one per adder."""

    shares_steps = True  # (items may reference any kept steps; each is sent once)

    def __init__(self, client: NativeReplayClient, num_keep_alive_refs: int, timeout_s: float) -> None:
        self._client, self._keep, self.timeout_s = client, num_keep_alive_refs, timeout_s
        self._id = f"{os.getpid()}-{next(_writer_ids)}-{threading.get_ident():x}"
        self._next = 0  # the next step's index
        self._window: collections.deque[int] = collections.deque()  # kept steps, oldest first
        self._columns: dict[int, list] = {}  # kept steps not sent yet
        self._sent: set[int] = set()  # kept steps the server holds for this writer
        self._items: list[list] = []  # items not inserted yet
        self._release: list[int] = []  # steps the server may let go of
        self._leaving: set[int] = set()  # steps out of the window that pending items still use
        self._batch = 1 if client.in_process else RPC_BATCH
        self._in_flight: tuple | None = None  # (_Pending, items, release) of the call not confirmed yet
        self._unsent_bytes = 0  # what the kept steps not sent yet hold
        self._uses: collections.Counter[int] = collections.Counter()  # step -> pending items using it
        self._segment: Segment | None = None  # (shared memory with a server on this host)
        self._no_segment = False
        self._closed = False

    def append(self, columns: list) -> int:
        """Keeps one step (a flat list of arrays, the table signature's order); returns its index."""
        index = self._next
        self._next += 1
        # (in one process the server keeps the very arrays it is given: copy them)
        copy = np.array if self._client.in_process else np.asarray
        self._columns[index] = kept = [copy(c) for c in columns]
        self._unsent_bytes += sum(c.nbytes for c in kept)
        self._window.append(index)
        if len(self._window) > self._keep:
            old = self._window.popleft()
            if self._uses[old]:
                self._leaving.add(old)  # (a pending item uses it: let go once that is inserted)
            elif old in self._sent:
                self._sent.discard(old)
                self._release.append(old)
            else:
                dropped = self._columns.pop(old, None)
                self._unsent_bytes -= sum(c.nbytes for c in dropped or ())
        return index

    def create_item(self, table: str, priority: float, steps: int | list[int]) -> None:
        """An item of the last ``steps`` appended steps, or of the steps ``steps`` lists (what
        ``append`` returned; each still kept: among the writer's last ``num_keep_alive_refs``).
        A one-step item's columns have the step's shape; a longer one's ``[length, ...]``."""
        if isinstance(steps, int):
            if not 1 <= steps <= len(self._window):
                raise ValueError(f"an item of {steps} steps, but the writer keeps the last {len(self._window)}")
            steps = list(self._window)[-steps:]
        elif (
            not steps
            or steps[0] < self._window[0]
            or any(i not in self._columns and i not in self._sent for i in steps)
        ):
            raise ValueError(
                f"an item of steps the writer no longer keeps ({steps[:3]}...; it keeps "
                f"{self._window[0]}..{self._window[-1]})"
            )
        self._items.append([table, float(priority), list(steps)])
        self._uses.update(steps)

    def commit(self) -> None:
        """Ends a vector step's writes: in one process its items go in now (a learner in the same
        thread may sample them next); over RPC they go in one call once ``RPC_BATCH`` items are
        pending (or at ``flush``), while the actor goes on. One call is in flight at a time: while
        it is, items gather (up to ``RPC_MAX_ITEMS`` items or ``RPC_MAX_BYTES`` of new steps) and
        go in the next call, so a fast writer sends larger calls instead of waiting on each."""
        if len(self._items) < self._batch or self._gathering():
            return
        self._send()

    def send_pending(self) -> None:
        """Sends the pending items now unless the call in flight is still unanswered (then they
        wait for it, as in ``commit``), without waiting for the answer: what a writer that stops
        writing for a while calls, since no next ``commit`` would send the items gathered behind
        the call in flight (a learner could wait on them forever)."""
        if self._items and (self._in_flight is None or self._in_flight[0].done()):
            self._send()

    def _gathering(self) -> bool:
        """Whether pending items wait for the next call: one is in flight, and they are fewer
        than ``RPC_MAX_ITEMS`` with new steps under ``RPC_MAX_BYTES``."""
        return (
            self._in_flight is not None
            and not self._in_flight[0].done()
            and len(self._items) < RPC_MAX_ITEMS
            and self._unsent_bytes < RPC_MAX_BYTES
        )

    def _send(self) -> None:
        """Sends the new steps and items in one call (see the module docstring), after the call
        in flight, if any, was confirmed."""
        self._confirm()
        if not self._items and len(self._release) < 256:
            return
        needed = {i for _, _, steps in self._items for i in steps} - self._sent
        steps = [[i, self._columns[i]] for i in sorted(needed)]
        items, release = self._items, self._release + sorted(self._leaving)
        result = self._insert_later(steps, items, release)
        self._sent |= needed  # (the server stores every step sent, whatever it inserts)
        self._sent -= self._leaving
        for i in needed:
            self._unsent_bytes -= sum(c.nbytes for c in self._columns.pop(i))
        self._items, self._release, self._leaving = [], [], set()
        self._uses.clear()
        self._in_flight = (result, items, release, steps)
        if self._client.in_process:
            self._confirm()

    def _insert_later(self, steps: list, items: list, release: list) -> _Pending:
        """The ``insert`` call (``NativeReplayServer.insert``'s stacked payload); its steps'
        columns through this writer's segment when it has one (the server on this host) and
        they hold ``SHARED_MIN_BYTES`` or more."""
        if self._client.in_process:  # (direct calls: the writer's own lists, nothing to encode)
            return self._client._call_later("insert_local", self._id, steps, items, release, self.timeout_s)
        groups, payload = _groups(steps), _item_payload(items)
        laid_out = [layout for _, group in groups for layout in _layouts(group)]
        size = footprint(laid_out)
        segment = self._segment_for(size) if size >= SHARED_MIN_BYTES else None
        laid = segment.reserve(laid_out) if segment else None
        if segment is None or laid is None:
            stacked = [[indices, _stacked(group)] for indices, group in groups]
            return self._client._call_later("insert", self._id, stacked, payload, _indices(release), self.timeout_s)
        places, views = iter(laid[0]), iter(laid[1])
        shared = []
        for indices, group in groups:
            shared.append([indices, [next(places) for _ in group[0]]])
            for j in range(len(group[0])):
                np.stack([columns[j] for columns in group], out=next(views))
        return self._client._call_later(
            "insert_shared", self._id, segment.name, shared, payload, _indices(release), self.timeout_s
        )

    def _segment_for(self, size: int) -> Segment | None:
        """This writer's segment, made (or made larger) to hold ``size`` bytes, if it may have one."""
        if not self._client.shared_memory or self._no_segment:
            return None
        if self._segment is None or self._segment.size < size:
            if self._segment is not None:
                self._client.release_segment(self._segment)
            self._segment = self._client.shared_segment(max(2 * size, SHARED_MIN_SIZE))
            self._no_segment = self._segment is None
        return self._segment

    def _confirm(self) -> None:
        """Waits for the call in flight; items the rate limiter held back past the timeout are
        the writer's again (sent with the next call) and raise ``TimeoutError``."""
        if self._in_flight is None:
            return
        result, items, release, steps = self._in_flight
        self._in_flight = None
        done = result()
        if done == -1:  # (the server maps no segment of this writer's: a new server) over RPC from now on
            self._no_segment = True
            done = self._client._call(
                "insert",
                self._id,
                stacked_groups(steps),
                _item_payload(items),
                _indices(release),
                self.timeout_s,
            )
        if done < len(items):
            self._items = items[done:] + self._items
            for _, _, steps in items[done:]:
                self._uses.update(steps)
            # (let go of only once every item is in; the steps out of the window that the items
            # back here use are the server's already: kept as leaving, as they were before the call)
            leaving = {i for _, _, steps in items[done:] for i in steps}.intersection(release)
            self._leaving |= leaving
            self._sent |= leaving
            self._release = [i for i in release if i not in leaving] + self._release
            raise TimeoutError(
                f"replay table '{items[done][0]}' did not take an item within {self.timeout_s}s "
                "(inserts wait while the learner lags behind the table's rate limiter or while "
                "a queue is full)"
            )

    def flush(self, block_until_num_items: int = 0) -> None:
        """``flush()``: sends what is pending and waits until the server confirmed every item.
        ``flush(k)`` with ``k > 0`` (an adder bounding what is pending): over RPC, while a call is
        in flight, the pending items wait for the next call (``_gathering``: ``commit`` sends them
        when it is answered, or once ``RPC_MAX_ITEMS`` are pending); else they are sent, and the writer
        waits only while more than ``max(k, RPC_MAX_ITEMS)`` items are unconfirmed. So at most
        ``RPC_MAX_ITEMS`` items (plus a call's) are ever unconfirmed, and a writer does not wait
        on each round trip."""
        if block_until_num_items > 0 and not self._client.in_process:
            if self._gathering():
                return
            self._send()
            if self._in_flight is not None and len(self._in_flight[1]) > max(block_until_num_items, RPC_MAX_ITEMS):
                self._confirm()
            return
        self._send()
        if self._in_flight is not None and len(self._in_flight[1]) > block_until_num_items:
            self._confirm()

    def close(self, timeout_s: float | None = None) -> bool:
        """Sends what is pending, then lets the server free this writer's steps. ``timeout_s``
        (a writer that stops): the table's rate limiter may hold the pending items back at most
        this long; those it did not take are dropped (and, if the call in flight was not
        answered by then, the server keeps this writer's steps until it stops). Returns whether
        every item went in."""
        if self._closed:
            return True
        self._closed = True
        confirmed, abandoned = True, False
        try:
            if timeout_s is None:
                self.flush()
            else:
                self.timeout_s = min(self.timeout_s, timeout_s)
                deadline = time.monotonic() + timeout_s
                while self._in_flight is not None and not self._in_flight[0].done() and time.monotonic() < deadline:
                    time.sleep(0.005)
                abandoned = self._in_flight is not None and not self._in_flight[0].done()
                if not abandoned:
                    try:
                        self.flush()
                    except TimeoutError:  # (the rate limiter held them back)
                        confirmed = False
        except (ReplayServerGone, ReplayClosed):
            confirmed = False  # (nothing more can reach a server that is gone; the writes that failed said so)
        finally:
            confirmed = confirmed and not abandoned and not self._items
            release, self._items, self._in_flight = self._release + sorted(self._sent | self._leaving), [], None
            self._release, self._sent, self._leaving, self._columns = [], set(), set(), {}
            self._unsent_bytes = 0
            self._uses.clear()
            if release and not abandoned:
                try:
                    self._client._call("insert", self._id, [], _item_payload([]), _indices(release), self.timeout_s)
                except (ReplayServerGone, ReplayClosed):
                    pass  # (a server that is gone holds nothing of this writer's any more)
            if self._segment is not None:
                self._client.release_segment(self._segment)
                self._segment = None
        return confirmed
