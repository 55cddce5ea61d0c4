"""``NativeReplayServer``: Shoal's own replay service (any Python, no TensorFlow).

It holds tables built from ``TableSpec``s (``shoal.replay.native.table``) and one step store
shared by their items. Its public methods are the whole service: called directly in one
process (``server.client``: no socket), or served by Shoal's RPC layer to other processes (the
launcher's replay node serves exactly ``SERVICE_METHODS``; every argument and result is plain
data and numpy arrays, nothing is unpickled).

**Writes.** A writer (``NativeWriter``) sends each step once, with the items that reference it,
in one ``insert`` call per vector step or chunk. Steps are copied into the rows of preallocated
per-field columns (``shoal.replay.native.columns.ColumnStore``, sized up front from each table's
``max_size`` and item length); an item is the rows of its steps. A row stays while the writer
still holds its step (it may be part of a later item: R2D2's overlapping sequences) or an item
references it, and goes back to the free list after that (a reference count; no step is copied
for a second item). A call's steps travel stacked (a column per run of steps of one layout) and
its items as four arrays, so that the codec handles a few arrays per call, not a few objects per
step. Every call is checked before anything of it is stored (``shoal.replay.native.validation``:
the tables' signatures, finite numbers, item lengths, priorities, a sample's size): a bad one is
one ``ValueError`` to its caller, and the server serves on.

**Same host.** A client on the server's host may send a call's step arrays, and take a sample's
columns, through a shared-memory segment of its own (``attach_shared``, ``insert_shared``,
``sample_shared``, ``detach_shared``; ``shoal.core.shared_memory``): the RPC then carries only
where the arrays lie.

**Samples** come back as one column per signature leaf with the items on the leading axis
(length-1 items squeezed, longer ones ``[num_items, length, ...]``), gathered with one indexing
per column; the items the rate limiter lets through at once are drawn as one batch
(``select_many``: the very draws one at a time would make, so seeded runs are unchanged). With
them come the items' keys,
sampling probabilities, table sizes, priorities and times sampled.

**Checkpoints** go to ``checkpoint_dir/<name>/``: ``tables.json`` (counts, sampler states,
items) and ``steps.npz`` (the steps, read back with ``allow_pickle=False``; a column of frame
stacks as its distinct frames once and per step their indices), then a ``DONE`` file; a server started on a ``checkpoint_dir`` restores the newest complete one, as Reverb's
default checkpointer does.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import tree

from shoal.core.shared_memory import Attached
from shoal.replay.checkpoints import latest_checkpoint
from shoal.replay.native.checkpoint_files import read_checkpoint
from shoal.replay.native.client import NativeReplayClient
from shoal.replay.native.columns import ColumnStore, Pooled
from shoal.replay.native.payload import stacked_groups
from shoal.replay.native.table import ReplayClosed, Saved, Table
from shoal.replay.native.validation import CallChecker, check_num_items, check_priorities, check_timeout
from shoal.replay.tables import TableSpec

SERVICE_METHODS = (
    "insert",
    "insert_items",
    "insert_items_shared",
    "sample",
    "mutate_priorities",
    "server_info",
    "checkpoint",
    "table_signatures",
    "attach_shared",
    "detach_shared",
    "insert_shared",
    "sample_shared",
)
RESTORE_ROWS = 4096  # rows of frame stacks a restore rebuilds at a time
MAX_SEGMENTS = 256  # client segments mapped at once (those of exited clients go first)


def _reserve_rows(store: ColumnStore, spec: TableSpec) -> None:
    """Sizes the store's lane for ``spec``'s steps up front (``max_size`` items of their length),
    so that a table filled to ``max_size`` never grows its columns: for one-step items the
    signature's leaves are a step's columns; for items of ``L`` steps, the leaves less their
    leading ``L`` axis (only the layout that steps arrive in is ever allocated)."""
    if spec.signature is None:
        return
    leaves = tree.flatten(spec.signature)
    store.reserve(tuple((np.dtype(s.dtype).str, tuple(s.shape)) for s in leaves), spec.max_size)
    lengths = {tuple(s.shape)[:1] for s in leaves}
    if len(lengths) == 1 and lengths != {()}:
        (length,) = lengths.pop()
        store.reserve(tuple((np.dtype(s.dtype).str, tuple(s.shape)[1:]) for s in leaves), spec.max_size * int(length))


def _spec_record(signature: Any) -> Any:
    """A table signature as plain data (its leaves ``{"__array__": [shape, dtype]}``)."""
    if signature is None:
        return None
    if isinstance(signature, dict):
        return {k: _spec_record(v) for k, v in signature.items()}
    if isinstance(signature, (list, tuple)):
        return type(signature)(_spec_record(v) for v in signature)
    return {"__array__": [list(signature.shape), np.dtype(signature.dtype).str]}


class NativeReplayServer:
    """Tables from ``tables`` (``TableSpec``s) and their step store; see the module docstring.

    ``seed``: every table samples from its own generator, seeded from ``(seed, table index)``.
    ``gated``: tables sample only what ``grant`` allowed (the one-process runner's determinism).
    """

    backend = "native"

    def __init__(
        self, tables: Sequence[TableSpec], checkpoint_dir: str | None = None, seed: int = 0, gated: bool = False
    ) -> None:
        if not tables:
            raise ValueError("a replay server needs at least one table")
        for table in tables:
            if not isinstance(table, TableSpec):
                raise TypeError(
                    f"native replay builds tables from shoal.replay.TableSpec, not "
                    f"{type(table).__module__}.{type(table).__name__} (a reverb.Table needs --replay reverb)"
                )
        names = [table.name for table in tables]
        if len(set(names)) < len(names):
            raise ValueError(f"replay table names must be unique; got {', '.join(names)}")
        self._store = ColumnStore()
        for spec in tables:
            _reserve_rows(self._store, spec)
        self._checker = CallChecker(tables)  # (every call checked before anything is stored)
        self._tables = {
            spec.name: Table(spec, self._store, np.random.default_rng([int(seed), i]), gated)
            for i, spec in enumerate(tables)
        }
        self._checkpoint_dir = checkpoint_dir
        self._segments: dict[str, Attached] = {}  # name -> mapping (shoal.core.shared_memory)
        self._segments_lock = threading.Lock()
        self.restored_from = None
        if checkpoint_dir:
            self.restored_from = latest_checkpoint(checkpoint_dir)
            if self.restored_from:
                self._restore(self.restored_from)
        self._sampled_at_start = {name: t.samples for name, t in self._tables.items()}

        self.address = f"inprocess-{id(self):x}"
        self.client = NativeReplayClient(self, self.address, in_process=True)

    def _table(self, name: str) -> Table:
        table = self._tables.get(name)
        if table is None:
            raise KeyError(f"replay table {name!r} is not served here; tables: {', '.join(self._tables)}")
        return table

    # -- the service -----------------------------------------------------------------------------
    def insert(self, writer: str, steps: list, items: list, release: Any, timeout_s: float) -> int:
        """Stores writer ``writer``'s ``steps`` (held for it) and inserts ``items`` in order, each
        waiting for the rate limiter until ``timeout_s`` passed; then lets go of the step indices
        in ``release``. Returns how many items it inserted: fewer than given when the limiter
        held one back (``release`` is then not applied: the writer sends it again with the rest).

        ``steps``: groups ``[indices, columns]``, each column an array of the group's steps on its
        leading axis (step ``indices[k]``'s columns are ``column[k]``). ``items``: ``[tables,
        priorities, lengths, indices]``, item ``j`` of table ``tables[j]`` and priority
        ``priorities[j]`` made of the next ``lengths[j]`` step indices of ``indices`` (a flat
        array). Columns travel stacked and items as four arrays, so that a call of many small
        steps and items costs the codec a few arrays, not a few objects per step.

        Everything is checked first (``shoal.replay.native.validation``): a call that does not
        fit the tables' signatures is refused in one ``ValueError``, nothing of it stored."""
        timeout_s = check_timeout(timeout_s)
        call = self._checker.check_insert(steps, items, release, self._held(writer))
        for indices, columns, _ in call.groups:
            self._store.add_rows([(writer, i) for i in indices], list(columns))
        return self._insert(writer, call.tables, call.priorities, call.step_lists, call.release, timeout_s)

    def _held(self, writer: Any) -> Callable[[list[int]], Any]:
        """``CallChecker.check_insert``'s ``held``: the layouts of ``writer``'s steps held here."""
        if not isinstance(writer, str):
            raise ValueError(f"a writer is named by a string, got {type(writer).__name__}")
        return lambda indices: self._store.layouts([(writer, i) for i in indices])

    def insert_local(
        self, writer: str, steps: list, items: list, release: list, timeout_s: float, blocks: Sequence = ()
    ) -> int:
        """``insert`` in one process (``NativeWriter``'s own lists, no payload to build):
        ``steps`` ``[index, columns]`` pairs (several stacked into one block, so that an item of
        them is gathered by slices), ``blocks`` ``[indices, columns, rows]`` (steps ``indices``
        are rows ``rows`` of ``columns``, the steps on their leading axis), ``items`` ``[table,
        priority, step indices]``. Not checked as ``insert`` is: its writers are this process's
        own (no other process can call it)."""
        for indices, block, rows in blocks:
            self._store.add_rows([(writer, i) for i in indices], block, rows)
        if len(steps) == 1:
            index, columns = steps[0]
            self._store.add((writer, index), [c[np.newaxis] for c in columns])
        elif steps:
            for indices, columns in stacked_groups(steps):
                self._store.add_rows([(writer, i) for i in indices.tolist()], columns)
        return self._insert(
            writer, [t for t, _, _ in items], [p for _, p, _ in items], [s for _, _, s in items], release, timeout_s
        )

    def insert_item_local(self, table: str, priority: float, columns: list, timeout_s: float) -> bool:
        """A one-step item of ``columns`` (one step, the table signature's order) into ``table``
        at once, in one process (``NativeWriter.append_item``): its step is copied into a row
        that only the item holds (no writer keeps it). Returns whether the rate limiter let it in
        before ``timeout_s`` (if not, nothing of it is kept). Not checked, as ``insert_local``."""
        target = self._table(table)
        lane, row = self._store.add_item_step(columns)
        inserted = False
        try:
            inserted = target.insert_row(lane, row, priority, time.monotonic() + float(timeout_s))
        finally:
            if not inserted:  # (held back, or a bad priority refused: the row goes)
                self._store.release_row(lane, row)
        return inserted

    def insert_items(self, runs: list, timeout_s: float) -> int:
        """One-step items whose steps come in the call (``NativeWriter.append_item`` over RPC),
        inserted in order, each waiting for the rate limiter until ``timeout_s`` passed; returns
        how many went in (fewer than given when the limiter held one back: the rest are not
        kept; the writer sends them again). ``runs``: ``[table, priorities, columns]``, the items
        of a run the rows of its columns (one array per signature leaf, the items on the leading
        axis) with ``priorities`` (a 1-D array). Each run's steps go into the table's columns in
        one copy per field and its items into the table under one hold of its lock. Everything
        is checked first (``CallChecker.check_items``): a bad call is one ``ValueError``, nothing
        of it stored."""
        timeout_s = check_timeout(timeout_s)
        checked = self._checker.check_items(runs)
        deadline = time.monotonic() + timeout_s
        done = 0
        for table, priorities, columns in checked:
            target = self._table(table)
            lane, rows = self._store.add_item_steps(columns)
            taken = target.insert_rows(lane, rows, priorities, deadline)
            done += taken
            if taken < len(priorities):
                self._store.release_rows(lane, rows[taken:])
                break
        return done

    def insert_items_shared(self, segment: str, runs: list, timeout_s: float) -> int:
        """``insert_items``, each run's columns read from ``segment`` (``[table, priorities,
        places]`` runs); -1 if that segment is not mapped here (the writer sends them over RPC)."""
        mapping = self._segments.get(segment)
        if mapping is None:
            return -1
        timeout_s = check_timeout(timeout_s)
        laid = []
        for run in runs if isinstance(runs, list) else [None]:
            if not (isinstance(run, list) and len(run) == 3 and isinstance(run[2], list)):
                raise ValueError(f"a run of items is [table, priorities, places], got {str(run)[:60]}")
            # (float columns copied out before they are checked, as insert_shared's)
            views = mapping.views(run[2])
            laid.append([run[0], run[1], [np.array(v) if v.dtype.kind in "fc" else v for v in views]])
        return self.insert_items(laid, timeout_s)

    def _insert(
        self, writer: str, tables: list, priorities: list, step_lists: list, release: list, timeout_s: float
    ) -> int:
        """Inserts item ``j`` (of table ``tables[j]``, ``priorities[j]``, writer ``writer``'s steps
        ``step_lists[j]``) in order, then releases ``release`` (``insert``)."""
        deadline = time.monotonic() + float(timeout_s)
        done = 0
        while done < len(tables):  # (a run of items for one table goes in under one hold of its lock)
            end = done + 1
            while end < len(tables) and tables[end] == tables[done]:
                end += 1
            table = self._table(tables[done])
            run = [
                (self._store.hold([(writer, i) for i in step_lists[j]]), float(priorities[j])) for j in range(done, end)
            ]
            taken = table.insert_many(run, deadline)
            for held, _ in run[taken:]:
                self._store.release(held)
            done += taken
            if taken < len(run):
                return done
        self._store.let_go([(writer, i) for i in release])
        return len(tables)

    def sample(
        self, table: str, num_items: int, timeout_s: float, min_items: int | None = None
    ) -> dict[str, Any] | None:
        """Up to ``num_items`` items of ``table``, as the rate limiter lets them through before
        ``timeout_s`` (with ``min_items``: no waiting past the first ``min_items`` for the rest;
        ``Table.sample``): ``{"columns": [...], "key", "probability", "table_size", "priority",
        "times_sampled"}`` (arrays, items on the leading axis), or ``None`` if none came."""
        num_items, timeout_s = check_num_items(num_items), check_timeout(timeout_s)
        least = None if min_items is None else check_num_items(min_items)
        taken, columns = self._table(table).sample(num_items, time.monotonic() + timeout_s, least)
        if taken is None:
            return None
        return {
            "columns": columns,
            "key": taken.key.astype(np.uint64),
            "probability": taken.probability,
            "table_size": taken.table_size,
            "priority": taken.priority,
            "times_sampled": taken.times_sampled.astype(np.int32),
        }

    def mutate_priorities(self, table: str, updates: dict | None = None, deletes: list | None = None) -> None:
        """Sets the priorities of the items ``updates`` names (``{key: priority}``) and deletes
        ``deletes``; keys no longer in the table are ignored."""
        clean = {int(k): float(v) for k, v in (updates or {}).items()}
        check_priorities(list(clean.values()))  # (the rule inserts follow too)
        self._table(table).mutate(list(clean), list(clean.values()), [int(k) for k in (deletes or [])])

    def server_info(self) -> dict[str, dict[str, Any]]:
        """Each table's size and counts (``Table.info``)."""
        return {name: table.info() for name, table in self._tables.items()}

    def table_signatures(self) -> dict[str, Any]:
        """Each table's signature as plain data (``_spec_record``)."""
        return {name: _spec_record(table.spec.signature) for name, table in self._tables.items()}

    # -- same-host bulk data (shoal.core.shared_memory) -----------------------------------------
    def attach_shared(self, segment: str, size: int) -> bool:
        """Maps client segment ``segment`` of ``size`` bytes; ``False`` if this host has none
        of that name (the client is on another host: it keeps to RPC)."""
        try:
            attached = Attached(segment, size)
        except FileNotFoundError:
            return False
        with self._segments_lock:
            self._segments[segment] = attached
            gone = [name for name, a in self._segments.items() if not _process_alive(a.pid)]
            gone += list(self._segments)[: max(0, len(self._segments) - len(gone) - MAX_SEGMENTS)]
            dropped = [self._segments.pop(name) for name in dict.fromkeys(gone) if name != segment]
        for mapping in dropped:
            _close_quietly(mapping)
        return True

    def detach_shared(self, segment: str) -> None:
        """Unmaps client segment ``segment`` (its client is done with it)."""
        with self._segments_lock:
            mapping = self._segments.pop(segment, None)
        if mapping is not None:
            _close_quietly(mapping)

    def insert_shared(self, writer: str, segment: str, steps: list, items: list, release: Any, timeout_s: float) -> int:
        """``insert``, the steps' stacked columns read from ``segment`` (``steps``: ``[indices,
        places]`` groups); -1 if that segment is not mapped here (the writer sends them over RPC)."""
        mapping = self._segments.get(segment)
        if mapping is None:
            return -1
        # (float columns are copied out before they are checked: the writer may write the
        # segment meanwhile. Then the steps are copied into the store's rows: the segment is the
        # writer's again once this call returns)
        timeout_s = check_timeout(timeout_s)
        groups = [
            [indices, [np.array(v) if v.dtype.kind in "fc" else v for v in mapping.views(places)]]
            for indices, places in steps
        ]
        return self.insert(writer, groups, items, release, timeout_s)

    def sample_shared(
        self, table: str, num_items: int, timeout_s: float, segment: str, min_items: int | None = None
    ) -> dict[str, Any] | None:
        """``sample``, its columns laid in ``segment`` (``"places"`` says where; ``"columns"`` is
        then ``None``); in the reply itself if they do not fit or the segment is not mapped here."""
        served = self.sample(table, num_items, timeout_s, min_items)
        mapping = self._segments.get(segment)
        if served is not None and mapping is not None:
            places = mapping.put(served["columns"])
            if places is not None:
                served["columns"], served["places"] = None, places
        return served

    # -- what the runner asks (in the server's process) -------------------------------------------
    def can_sample(self, table: str, num_items: int) -> bool:
        """Whether ``table``'s rate limiter would let ``num_items`` more items be sampled now."""
        return self._table(table).can_sample(num_items)

    def items_sampled(self, table: str) -> int:
        """Items ``table`` served since this server started."""
        return self._table(table).samples - self._sampled_at_start[table]

    def grant(self, table: str, num_items: int, after_mutations: int = 0) -> None:
        """(Gated) lets ``num_items`` more items of ``table`` be sampled once ``after_mutations``
        priority updates reached it (``Table.grant``)."""
        self._table(table).grant(num_items, after_mutations)

    def stop(self) -> None:
        """Wakes every waiting insert and sample with ``ReplayClosed``."""
        for table in self._tables.values():
            table.close()
        with self._segments_lock:
            mappings, self._segments = list(self._segments.values()), {}
        for mapping in mappings:
            _close_quietly(mapping)

    # -- checkpoints -----------------------------------------------------------------------------
    def checkpoint(self) -> str:
        """Writes a checkpoint to ``checkpoint_dir`` and returns its path (module docstring)."""
        if not self._checkpoint_dir:
            raise ValueError("this replay server has no checkpoint directory")
        states = {name: table.state() for name, table in self._tables.items()}
        try:
            return self._write_checkpoint(states)
        finally:  # (state() held the items' steps for this checkpoint)
            for name, (_, saved) in states.items():
                self._tables[name].release_saved(saved)

    def _write_checkpoint(self, states: dict[str, tuple[dict[str, Any], Saved]]) -> str:
        assert self._checkpoint_dir is not None  # (checkpoint() refuses a server without one)
        lanes = self._store.rows_by_lane([saved.steps(i) for _, saved in states.values() for i in range(len(saved))])
        arrays: dict[str, np.ndarray] = {}
        numbers: dict[int, tuple[int, np.ndarray]] = {}  # lane -> (its number here, its rows)
        for number, (lane, (rows, columns)) in enumerate(sorted(lanes.items())):
            numbers[lane] = (number, rows)
            for c, column in enumerate(columns):
                if isinstance(column, Pooled):  # (frame stacks: their frames once, indices per row)
                    arrays[f"l{number}_c{c}_frames"], arrays[f"l{number}_c{c}_index"] = column
                else:
                    arrays[f"l{number}_c{c}"] = column

        def where(steps: tuple[int, np.ndarray]) -> list[list[int]]:  # [layout number, row] pairs
            number, rows = numbers[steps[0]]
            return [[number, row] for row in np.searchsorted(rows, steps[1]).tolist()]

        def items(saved: Saved) -> list[list]:
            return [
                [key, priority, times, where(saved.steps(i))]
                for i, (key, priority, times) in enumerate(
                    zip(saved.key.tolist(), saved.priority.tolist(), saved.times_sampled.tolist())
                )
            ]

        record = {
            "format": 1,
            "tables": {name: {"counts": counts, "items": items(saved)} for name, (counts, saved) in states.items()},
            "layouts": [len(columns) for _, (_, columns) in sorted(lanes.items())],
        }
        os.makedirs(self._checkpoint_dir, exist_ok=True)
        name = f"{time.time_ns():020d}"
        final = os.path.join(self._checkpoint_dir, name)
        partial = os.path.join(self._checkpoint_dir, f".{name}.partial")
        os.mkdir(partial)
        try:
            with open(os.path.join(partial, "steps.npz"), "wb") as steps_file:
                np.savez(steps_file, **arrays)
            with open(os.path.join(partial, "tables.json"), "w") as tables_file:
                json.dump(record, tables_file, allow_nan=False)
            os.rename(partial, final)
            with open(os.path.join(final, "DONE"), "w"):
                pass
        except BaseException:
            shutil.rmtree(partial, ignore_errors=True)
            raise
        return final

    def _restore(self, path: str) -> None:
        """Puts back the checkpoint at ``path`` (checked through first: ``checkpoint_files``)."""
        record, blocks = read_checkpoint(path, self._checker)
        ids = []  # (each layout's steps go into the store at once, held until the items hold them)
        for number, block in enumerate(blocks):
            count = len(block[0].indices if isinstance(block[0], Pooled) else block[0]) if block else 0
            ids.append([("checkpoint", number, row) for row in range(count)])
            if not any(isinstance(column, Pooled) for column in block):
                self._store.add_rows(ids[-1], block)
                continue
            for start in range(0, count, RESTORE_ROWS):  # (frame stacks rebuilt a chunk at a time)
                stop = min(count, start + RESTORE_ROWS)
                chunk = [c.rebuilt(start, stop) if isinstance(c, Pooled) else c[start:stop] for c in block]
                self._store.add_rows(ids[-1][start:stop], chunk)
        for name, saved in record["tables"].items():
            items = []
            for key, priority, times_sampled, steps in saved["items"]:
                held = self._store.hold([ids[int(number)][int(row)] for number, row in steps])
                items.append((int(key), held, float(priority), int(times_sampled)))
            self._tables[name].restore(saved["counts"], items)
        for layout_ids in ids:  # (no writer holds them: the items' references keep them)
            self._store.let_go(layout_ids)


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _close_quietly(mapping: Attached) -> None:
    try:
        mapping.close()
    except BufferError:  # (a call still reads it: the mapping goes when that call is done with it)
        pass


__all__ = ["NativeReplayServer", "ReplayClosed", "SERVICE_METHODS"]
