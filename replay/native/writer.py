"""``NativeWriter``: what adders write through (as Reverb's ``TrajectoryWriter`` for the Reverb
backend): ``append(columns)`` keeps a step, ``create_item(table, priority, length)`` makes an
item of the last ``length`` steps, ``commit()`` ends a vector step's writes and ``flush()``
sends what is new in one ``insert`` call (each step once, however many items use it; over RPC,
``commit`` sends every ``RPC_BATCH`` items). Inserts wait for the table's rate limiter up to the
writer's timeout; then ``commit`` raises ``TimeoutError`` and keeps what was not inserted.

Over RPC a vector step travels as arrays, never step by step: ``append_item``'s one-step items
gather in columns (``payload.ItemRun``: one preallocated array per field, a row per item) and go
in one ``insert_items`` message, one array per field, that the server inserts in one call;
``append_rows``' rows stay the block they came in and travel as it, consecutive blocks joined
(``payload.block_groups``). What a writer holds is bounded: it sends once ``RPC_BATCH`` items
are pending, gathers at most ``RPC_MAX_ITEMS`` items (or ``RPC_MAX_BYTES``) while a call is in
flight, and sends everything at ``flush`` and ``close``; every wait is bounded by the RPC call's
deadline or the writer's ``timeout_s``.
"""

from __future__ import annotations

import collections
import itertools
import os
import threading
import time
from typing import Any

import numpy as np

from shoal.core.shared_memory import Segment, footprint
from shoal.replay.native.payload import ItemRun, block_groups, stacked_groups
from shoal.replay.native.payload import groups as _groups
from shoal.replay.native.payload import indices as _indices
from shoal.replay.native.payload import item_payload as _item_payload
from shoal.replay.native.payload import layouts as _layouts
from shoal.replay.native.payload import stacked as _stacked
from shoal.replay.native.table import ReplayClosed, ReplayServerGone

_writer_ids = itertools.count()
RPC_BATCH = 8  # items a writer sends in one RPC at least (adders flush at least this often) ...
RPC_MAX_ITEMS = 512  # ... and at most, gathered while the call before is under way ...
RPC_MAX_BYTES = 32 << 20  # ... or until its steps hold this many bytes
SHARED_MIN_BYTES = 64 << 10  # a call's steps go through shared memory from this size (same host)
SHARED_MIN_SIZE = 4 << 20  # a writer's first segment (it grows to twice the largest call)


class _Call:
    """The call in flight: ``result`` (``_Pending``), and what it carries, for the writer to take
    back what the rate limiter held back: step ``items`` with the steps' ``release``, ``steps``
    and ``blocks`` (an ``insert``), or ``runs`` of one-step items (an ``insert_items``)."""

    __slots__ = ("result", "items", "release", "steps", "blocks", "runs", "count")

    def __init__(self, result: Any, items: list, release: list, steps: list, blocks: list, runs: list) -> None:
        self.result, self.items, self.release, self.steps, self.blocks, self.runs = (
            result,
            items,
            release,
            steps,
            blocks,
            runs,
        )
        self.count = len(items) + sum(len(priorities) for _, priorities, _ in runs)


class NativeWriter:
    """Steps and items for a native server (module docstring). Not thread-safe: one per adder."""

    shares_steps = True  # (items may reference any kept steps; each is sent once)

    def __init__(self, client: Any, num_keep_alive_refs: int, timeout_s: float) -> None:
        self._client, self._keep, self.timeout_s = client, num_keep_alive_refs, timeout_s
        self._id = f"{os.getpid()}-{next(_writer_ids)}-{threading.get_ident():x}"
        self._next = 0  # the next step's index
        self._window: collections.deque[int] = collections.deque()  # kept steps, oldest first
        self._columns: dict[int, list] = {}  # kept steps not sent yet
        self._sent: set[int] = set()  # kept steps the server holds for this writer
        self._items: list[list] = []  # items not inserted yet
        self._runs: list[ItemRun] = []  # (over RPC) append_item's items not sent yet, oldest first
        self._run_items = 0  # the items they hold
        self._release: list[int] = []  # steps the server may let go of
        self._leaving: set[int] = set()  # steps out of the window that pending items still use
        self._batch = 1 if client.in_process else RPC_BATCH
        self._in_flight: _Call | None = None  # the call not confirmed yet
        self._unsent_bytes = 0  # what the kept steps not sent yet hold (over RPC: in one process nothing waits)
        self._count_bytes = not client.in_process
        self._blocks: dict[int, tuple[int, list]] = {}  # unsent step -> its append_rows block
        self._uses: collections.Counter[int] = collections.Counter()  # step -> pending items using it
        self._segment: Segment | None = None  # (shared memory with a server on this host)
        self._no_segment = False
        self._closed = False
        # (in one process: the server's own method, called directly; nothing to settle)
        self._insert_item = client._service.insert_item_local if client.in_process else None

    def append(self, columns: list) -> int:
        """Keeps one step (a flat list of arrays, the table signature's order); returns its index."""
        index = self._next
        self._next += 1
        # (in one process the server keeps the very arrays it is given: copy them)
        copy = np.array if self._client.in_process else np.asarray
        self._columns[index] = kept = [copy(c) for c in columns]
        if self._count_bytes:
            self._unsent_bytes += sum(c.nbytes for c in kept)
        self._window.append(index)
        if len(self._window) > self._keep:
            self._leave(self._window.popleft())
        return index

    def append_rows(self, columns: list) -> range:
        """Keeps each row of ``columns`` (arrays whose leading axis is the steps: a vector step's
        envs) as one step, as ``append`` row by row would, with one copy per column; returns
        their indices."""
        copy = np.array if self._client.in_process else np.asarray
        block = [copy(c) for c in columns]
        start = self._next
        indices = range(start, start + len(block[0]))
        self._next = indices.stop
        self._columns.update(zip(indices, map(list, zip(*block))))  # (each step: views of its rows)
        if self._count_bytes:
            self._unsent_bytes += sum(c.nbytes for c in block)
        # (sent as rows of the block: no step is stacked again)
        self._blocks.update(zip(indices, itertools.repeat((start, block))))
        window = self._window
        window.extend(indices)
        for _ in range(len(window) - self._keep):
            self._leave(window.popleft())
        return indices

    def _leave(self, old: int) -> None:
        """Step ``old`` left the window: let go of once no pending item uses it."""
        if self._uses.get(old):
            self._leaving.add(old)  # (a pending item uses it: let go once that is inserted)
        elif old in self._sent:
            self._sent.discard(old)
            self._release.append(old)
        else:
            dropped = self._columns.pop(old, None)
            if self._count_bytes:
                self._unsent_bytes -= sum(c.nbytes for c in dropped or ())
            self._blocks.pop(old, None)

    def create_item(self, table: str, priority: float, steps: int | list[int]) -> None:
        """An item of the last ``steps`` appended steps, or of the steps ``steps`` lists (what
        ``append`` returned; each still kept: among the writer's last ``num_keep_alive_refs``).
        A one-step item's columns have the step's shape; a longer one's ``[length, ...]``."""
        if self._runs and not self._items:  # (append_item's items go first: they are older)
            self._send()
        if isinstance(steps, int):
            if not 1 <= steps <= len(self._window):
                raise ValueError(f"an item of {steps} steps, but the writer keeps the last {len(self._window)}")
            steps = list(self._window)[-steps:]
        elif not steps or not self._window:
            raise ValueError(
                f"an item of steps {list(steps)[:3]}: an item needs at least one step, of those the "
                f"writer keeps ({len(self._window)} now)"
            )
        elif not self._window[0] <= min(steps) <= max(steps) <= self._window[-1] and (
            # (the window holds consecutive indices: steps inside it are kept; else each is asked)
            steps[0] < self._window[0] or any(i not in self._columns and i not in self._sent for i in steps)
        ):
            raise ValueError(
                f"an item of steps the writer no longer keeps ({steps[:3]}...; it keeps "
                f"{self._window[0]}..{self._window[-1]})"
            )
        self._items.append([table, float(priority), list(steps)])
        self._uses.update(steps)

    def append_item(self, table: str, priority: float, columns: list) -> None:
        """``append(columns)``, ``create_item(table, priority, 1)`` and ``commit()`` in one call
        (an n-step adder's whole vector step), except that the step is kept for this item alone
        (no later item may name it). In one process, with nothing pending, it goes straight into
        the table's columns (one copy, no step bookkeeping); if the rate limiter holds it back
        past the timeout it is pending as ``commit`` leaves it (``TimeoutError``). Over RPC it
        joins the items' columns (``ItemRun``: one copy per field), sent as ``commit`` sends
        (after the step items pending before it, if any: those go first, in order)."""
        if self._insert_item is not None and not self._items and self._in_flight is None:
            if self._insert_item(table, priority, columns, self.timeout_s):
                return
            self.append(columns)
            self.create_item(table, priority, 1)
            raise TimeoutError(
                f"replay table '{table}' did not take an item within {self.timeout_s}s "
                "(inserts wait while the learner lags behind the table's rate limiter or while "
                "a queue is full)"
            )
        if not self._client.in_process and not self._items:
            columns = [np.asarray(c) for c in columns]
            run = self._runs[-1] if self._runs else None
            if run is None or not run.fits(table, columns):
                run = ItemRun(table, columns, 2 * RPC_BATCH)
                self._runs.append(run)
            run.add(priority, columns)
            self._run_items += 1
            self._unsent_bytes += run.row_bytes
            self.commit()
            return
        self.append(columns)
        self.create_item(table, priority, 1)
        self.commit()

    def _pending(self) -> int:
        """Items written and not sent yet."""
        return len(self._items) + self._run_items

    def commit(self) -> None:
        """Ends a vector step's writes: in one process its items go in now (a learner in the same
        thread may sample them next); over RPC they go in one call once ``RPC_BATCH`` items are
        pending (or at ``flush``), while the actor goes on. One call is in flight at a time: while
        it is, items gather (up to ``RPC_MAX_ITEMS`` items or ``RPC_MAX_BYTES`` of new steps) and
        go in the next call, so a fast writer sends larger calls instead of waiting on each."""
        if self._pending() < self._batch or self._gathering():
            return
        self._send()

    def send_pending(self) -> None:
        """Sends the pending items now unless the call in flight is still unanswered (then they
        wait for it, as in ``commit``), without waiting for the answer: what a writer that stops
        writing for a while calls, since no next ``commit`` would send the items gathered behind
        the call in flight (a learner could wait on them forever)."""
        if self._pending() and (self._in_flight is None or self._in_flight.result.done()):
            self._send()

    def _gathering(self) -> bool:
        """Whether pending items wait for the next call: one is in flight, and they are fewer
        than ``RPC_MAX_ITEMS`` with new steps under ``RPC_MAX_BYTES``."""
        return (
            self._in_flight is not None
            and not self._in_flight.result.done()
            and self._pending() < RPC_MAX_ITEMS
            and self._unsent_bytes < RPC_MAX_BYTES
        )

    def _send(self) -> None:
        """Sends the new steps and items in one call (see the module docstring), after the call
        in flight, if any, was confirmed. ``append_item``'s items (older than any step item
        pending) go first, in a call of their own."""
        self._confirm()
        if self._runs:
            self._send_runs()
            return
        if not self._items and len(self._release) < 256:
            return
        needed = {i for _, _, steps in self._items for i in steps} - self._sent
        steps, blocks = self._new_steps(sorted(needed))
        items, release = self._items, self._release + sorted(self._leaving)
        result, blocks = self._insert_later(steps, items, release, blocks)
        self._sent |= needed  # (the server stores every step sent, whatever it inserts)
        self._sent -= self._leaving
        for i in needed:
            columns = self._columns.pop(i)
            if self._count_bytes:
                self._unsent_bytes -= sum(c.nbytes for c in columns)
        self._items, self._release, self._leaving = [], [], set()
        self._uses.clear()
        self._in_flight = _Call(result, items, release, steps, blocks, [])
        if self._client.in_process:
            self._confirm()

    def _send_runs(self) -> None:
        """Sends ``append_item``'s pending items in one ``insert_items`` call: per run of one
        table and layout its priorities and one array per field (through this writer's segment
        when the server is on this host and they hold ``SHARED_MIN_BYTES`` or more)."""
        runs = [run.message() for run in self._runs]
        self._unsent_bytes -= sum(run.row_bytes * run.count for run in self._runs)
        self._runs, self._run_items = [], 0
        arrays = [c for _, _, columns in runs for c in columns]
        size = footprint([(c.dtype, c.shape) for c in arrays])
        segment = self._segment_for(size) if size >= SHARED_MIN_BYTES else None
        places = segment.put(arrays) if segment else None
        if segment is None or places is None:
            result = self._client._call_later("insert_items", runs, self.timeout_s)
        else:
            at = iter(places)
            laid = [[table, priorities, [next(at) for _ in columns]] for table, priorities, columns in runs]
            result = self._client._call_later("insert_items_shared", segment.name, laid, self.timeout_s)
        self._in_flight = _Call(result, [], [], [], [], runs)

    def _new_steps(self, indices: list[int]) -> tuple[list, list]:
        """Steps ``indices`` (sorted) as a call sends them: ``[index, columns]`` each, and (in one
        process) those of ``append_rows`` blocks as ``[indices, block, rows]`` per block."""
        if not self._blocks:
            return [[i, self._columns[i]] for i in indices], []
        steps: list = []
        runs: dict[int, tuple[list, list[int]]] = {}
        blocks = self._blocks
        for i in indices:
            found = blocks.pop(i, None)
            if found is None:
                steps.append([i, self._columns[i]])
            else:
                runs.setdefault(found[0], (found[1], []))[1].append(i)
        return steps, [[rows, block, np.subtract(rows, start)] for start, (block, rows) in runs.items()]

    def _insert_later(self, steps: list, items: list, release: list, blocks: list) -> tuple[Any, list]:
        """The ``insert`` call (``NativeReplayServer.insert``'s stacked payload) and the step
        groups of ``blocks`` it sends (over RPC: ``append_rows``' blocks as they are,
        ``payload.block_groups``); its steps' columns through this writer's segment when it has
        one (the server on this host) and they hold ``SHARED_MIN_BYTES`` or more."""
        if self._client.in_process:  # (direct calls: the writer's own lists, nothing to encode)
            call = self._client._call_later("insert_local", self._id, steps, items, release, self.timeout_s, blocks)
            return call, blocks
        groups, payload, joined = _groups(steps), _item_payload(items), block_groups(blocks)
        laid_out = [layout for _, group in groups for layout in _layouts(group)]
        laid_out += [(c.dtype, c.shape) for _, columns in joined for c in columns]
        size = footprint(laid_out)
        segment = self._segment_for(size) if size >= SHARED_MIN_BYTES else None
        laid = segment.reserve(laid_out) if segment else None
        if segment is None or laid is None:
            stacked = [[indices, _stacked(group)] for indices, group in groups] + joined
            call = self._client._call_later("insert", self._id, stacked, payload, _indices(release), self.timeout_s)
            return call, joined
        places, views = iter(laid[0]), iter(laid[1])
        shared = []
        for indices, group in groups:
            shared.append([indices, [next(places) for _ in group[0]]])
            for j in range(len(group[0])):
                np.stack([columns[j] for columns in group], out=next(views))
        for indices, columns in joined:
            shared.append([indices, [next(places) for _ in columns]])
            for column in columns:
                np.copyto(next(views), column)
        call = self._client._call_later(
            "insert_shared", self._id, segment.name, shared, payload, _indices(release), self.timeout_s
        )
        return call, joined

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
        call = self._in_flight
        self._in_flight = None
        if call.runs:
            self._confirm_runs(call)
            return
        items, release = call.items, call.release
        done = call.result()
        if done == -1:  # (the server maps no segment of this writer's: a new server) over RPC from now on
            self._no_segment = True
            done = self._client._call(
                "insert",
                self._id,
                stacked_groups(call.steps) + call.blocks,
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

    def _confirm_runs(self, call: _Call) -> None:
        """``_confirm`` of an ``insert_items`` call: the items the rate limiter held back are
        the writer's again, first in line (``TimeoutError``)."""
        done = call.result()
        if done == -1:  # (the server maps no segment of this writer's) over RPC from now on
            self._no_segment = True
            done = self._client._call("insert_items", call.runs, self.timeout_s)
        back: list[ItemRun] = []
        for table, priorities, columns in call.runs:
            if done < len(priorities):
                back.append(ItemRun.of([table, priorities[done:], [c[done:] for c in columns]]))
            done = max(0, done - len(priorities))
        if back:
            self._runs = back + self._runs
            self._run_items += sum(run.count for run in back)
            self._unsent_bytes += sum(run.row_bytes * run.count for run in back)
            raise TimeoutError(
                f"replay table '{back[0].table}' did not take an item within {self.timeout_s}s "
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
            if self._in_flight is not None and self._in_flight.count > max(block_until_num_items, RPC_MAX_ITEMS):
                self._confirm()
            return
        self._send()
        if self._items:  # (append_item's items went first, in a call of their own: now the rest)
            self._send()
        if self._in_flight is not None and self._in_flight.count > block_until_num_items:
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
                while self._in_flight is not None and not self._in_flight.result.done() and time.monotonic() < deadline:
                    time.sleep(0.005)
                abandoned = self._in_flight is not None and not self._in_flight.result.done()
                if not abandoned:
                    try:
                        self.flush()
                    except TimeoutError:  # (the rate limiter held them back)
                        confirmed = False
        except (ReplayServerGone, ReplayClosed):
            confirmed = False  # (nothing more can reach a server that is gone; the writes that failed said so)
        finally:
            confirmed = confirmed and not abandoned and not self._items and not self._runs
            release, self._items, self._in_flight = self._release + sorted(self._sent | self._leaving), [], None
            self._runs, self._run_items = [], 0
            self._release, self._sent, self._leaving, self._columns = [], set(), set(), {}
            self._blocks = {}
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
