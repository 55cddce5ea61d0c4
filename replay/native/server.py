"""``NativeReplayServer``: Shoal's own replay service (any Python, no TensorFlow).

It holds tables built from ``TableSpec``s (``shoal.replay.native.table``) and one step store
shared by their items. Its public methods are the whole service: called directly in one
process (``server.client``: no socket), or served by Shoal's RPC layer to other processes (the
launcher's replay node serves exactly ``SERVICE_METHODS``; every argument and result is plain
data and numpy arrays, nothing is unpickled).

**Writes.** A writer (``NativeWriter``) sends each step once, with the items that reference it,
in one ``insert`` call per vector step or chunk. The server keeps a step while the writer still
holds it (it may be part of a later item: R2D2's overlapping sequences) or an item references
it, and frees it after that (a reference count; no step is copied for a second item). A call's
steps travel stacked (a column per run of steps of one layout) and its items as four arrays, so
that the codec handles a few arrays per call, not a few objects per step; the steps stay rows of
those stacked columns, and an item of evenly spaced rows of one call (one env's steps among
several envs') is sampled as one strided slice per column instead of a step at a time. Every
call is checked before anything of it is stored (``shoal.replay.native.validation``: the tables'
signatures, finite numbers, item lengths, priorities, a sample's size): a bad one is one
``ValueError`` to its caller, and the server serves on.

**Same host.** A client on the server's host may send a call's step arrays, and take a sample's
columns, through a shared-memory segment of its own (``attach_shared``, ``insert_shared``,
``sample_shared``, ``detach_shared``; ``shoal.replay.native.shared``): the RPC then carries only
where the arrays lie.

**Samples** come back as one column per signature leaf with the items on the leading axis
(length-1 items squeezed, longer ones ``[num_items, length, ...]``), with the items' keys,
sampling probabilities, table sizes, priorities and times sampled.

**Checkpoints** go to ``checkpoint_dir/<name>/``: ``tables.json`` (counts, sampler states,
items) and ``steps.npz`` (the steps, read back with ``allow_pickle=False``), then a ``DONE``
file; a server started on a ``checkpoint_dir`` restores the newest complete one, as Reverb's
default checkpointer does.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from typing import Any, Sequence

import numpy as np

from shoal.replay.native.payload import stacked_groups
from shoal.replay.native.shared import Attached
from shoal.replay.native.table import Item, ReplayClosed, Table
from shoal.replay.native.validation import CallChecker, check_num_items, check_priorities, check_timeout
from shoal.replay.tables import TableSpec

SERVICE_METHODS = (
    "insert",
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
MAX_SEGMENTS = 256  # client segments mapped at once (those of exited clients go first)


class StepStore:
    """Steps by id, each with a reference count (the items that use it, plus one while its
    writer holds it, let go of once: ``let_go``). Thread-safe. A step's columns are kept with a leading axis of 1, so a
    sample's column is one ``np.concatenate`` (``np.stack`` of many small arrays cost 5x more).
    Steps that arrived together are rows of one *block* (an array per column) and are kept as
    views of it, so that an item of consecutive rows of one block is gathered as one slice per
    column (``pieces``); a block's memory goes with the last of its steps."""

    def __init__(self) -> None:
        self._steps: dict[Any, list] = {}  # id -> [columns, references, block, row, writer holds it]
        self._lock = threading.Lock()

    def add(self, step_id: Any, columns: list) -> None:
        with self._lock:
            self._steps[step_id] = [columns, 1, None, 0, True]

    def add_rows(self, step_ids: Sequence[Any], block: list, rows: Sequence[int] | None = None) -> None:
        """Steps ``step_ids`` are rows ``rows`` (default ``0, 1, ...``) of ``block`` (one array
        per column)."""
        with self._lock:
            for step_id, row in zip(step_ids, range(len(step_ids)) if rows is None else rows):
                self._steps[step_id] = [[c[row : row + 1] for c in block], 1, block, row, True]

    def hold(self, step_ids: Sequence[Any]) -> tuple:
        with self._lock:
            missing = [s for s in step_ids if s not in self._steps]
            if missing:
                raise KeyError(f"an item references steps the server does not hold: {missing[:3]}")
            for s in step_ids:
                self._steps[s][1] += 1
        return tuple(step_ids)

    def release(self, step_ids: Sequence[Any]) -> None:
        with self._lock:
            for s in step_ids:
                entry = self._steps.get(s)
                if entry is not None:
                    entry[1] -= 1
                    if entry[1] <= 0:
                        del self._steps[s]

    def let_go(self, step_ids: Sequence[Any]) -> None:
        """The writer that added ``step_ids`` holds them no more: each loses that one reference
        once (a step released twice, or never added, is left as it is)."""
        with self._lock:
            for s in step_ids:
                entry = self._steps.get(s)
                if entry is not None and entry[4]:
                    entry[4] = False
                    entry[1] -= 1
                    if entry[1] <= 0:
                        del self._steps[s]

    def layouts(self, step_ids: Sequence[Any]) -> list[tuple | None]:
        """Each step's layout (``(shape, dtype.str)`` per column), ``None`` for one not held."""
        out: list[tuple | None] = []
        seen: dict[int, tuple] = {}  # (steps of one block share a layout)
        with self._lock:
            for s in step_ids:
                entry = self._steps.get(s)
                if entry is None:
                    out.append(None)
                    continue
                layout = seen.get(id(entry[2])) if entry[2] is not None else None
                if layout is None:
                    layout = tuple((c.shape[1:], c.dtype.str) for c in entry[0])
                    if entry[2] is not None:
                        seen[id(entry[2])] = layout
                out.append(layout)
        return out

    def get(self, step_ids: Sequence[Any]) -> list[list]:
        with self._lock:
            return [self._steps[s][0] for s in step_ids]

    def pieces(self, step_ids: Sequence[Any]) -> list[tuple[list | None, list, slice, int]]:
        """The steps as runs, in order: ``(block, columns, rows, count)``, ``count`` steps that
        are the rows ``rows`` (a slice, evenly spaced: a writer that appends each env's step in
        turn lays one env's steps ``num_envs`` rows apart) of ``block``, or (``block`` None) one
        step's ``columns``."""
        runs: list[list] = []  # [block, columns, start, last, stride, count]
        with self._lock:
            for s in step_ids:
                columns, _, block, row, _ = self._steps[s]
                run = runs[-1] if runs else None
                if block is not None and run is not None and run[0] is block and row > run[3]:
                    if run[5] == 1 or row - run[3] == run[4]:
                        run[3], run[4], run[5] = row, row - run[3], run[5] + 1
                        continue
                runs.append([block, columns, row, row, 1, 1])
        return [
            (block, columns, slice(start, last + 1, stride), count)
            for block, columns, start, last, stride, count in runs
        ]

    def __len__(self) -> int:
        return len(self._steps)

    def __contains__(self, step_id: Any) -> bool:
        return step_id in self._steps


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
        self._store = StepStore()
        self._checker = CallChecker(tables)  # (every call checked before anything is stored)
        self._tables = {
            spec.name: Table(spec, self._store, np.random.default_rng([int(seed), i]), gated)
            for i, spec in enumerate(tables)
        }
        self._keys = iter(range(1, 1 << 62))
        self._key_lock = threading.Lock()
        self._checkpoint_dir = checkpoint_dir
        self._segments: dict[str, Attached] = {}  # name -> mapping (shoal.replay.native.shared)
        self._segments_lock = threading.Lock()
        self.restored_from = None
        if checkpoint_dir:
            from shoal.replay.server import latest_checkpoint

            self.restored_from = latest_checkpoint(checkpoint_dir)
            if self.restored_from:
                self._restore(self.restored_from)
        self._sampled_at_start = {name: t.samples for name, t in self._tables.items()}
        from shoal.replay.native.client import NativeReplayClient

        self.address = f"inprocess-{id(self):x}"
        self.client = NativeReplayClient(self, self.address, in_process=True)

    def _table(self, name: str) -> Table:
        table = self._tables.get(name)
        if table is None:
            raise KeyError(f"replay table {name!r} is not served here; tables: {', '.join(self._tables)}")
        return table

    def _next_key(self) -> int:
        with self._key_lock:
            return next(self._keys)

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

    def _held(self, writer: Any):
        """``CallChecker.check_insert``'s ``held``: the layouts of ``writer``'s steps held here."""
        if not isinstance(writer, str):
            raise ValueError(f"a writer is named by a string, got {type(writer).__name__}")
        return lambda indices: self._store.layouts([(writer, i) for i in indices])

    def insert_local(self, writer: str, steps: list, items: list, release: list, timeout_s: float) -> int:
        """``insert`` in one process (``NativeWriter``'s own lists, no payload to build):
        ``steps`` ``[index, columns]`` pairs (several stacked into one block, so that an item of
        them is gathered by slices), ``items`` ``[table, priority, step indices]``. Not checked as
        ``insert`` is: its writers are this process's own (no other process can call it)."""
        if len(steps) == 1:
            index, columns = steps[0]
            self._store.add((writer, index), [c[np.newaxis] for c in columns])
        elif steps:
            for indices, columns in stacked_groups(steps):
                self._store.add_rows([(writer, i) for i in indices.tolist()], columns)
        return self._insert(
            writer, [t for t, _, _ in items], [p for _, p, _ in items], [s for _, _, s in items], release, timeout_s
        )

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
                (self._next_key(), self._store.hold([(writer, i) for i in step_lists[j]]), float(priorities[j]))
                for j in range(done, end)
            ]
            taken = table.insert_many(run, deadline)
            for _, held, _ in run[taken:]:
                self._store.release(held)
            done += taken
            if taken < len(run):
                return done
        self._store.let_go([(writer, i) for i in release])
        return len(tables)

    def sample(self, table: str, num_items: int, timeout_s: float) -> dict[str, Any] | None:
        """Up to ``num_items`` items of ``table``, as the rate limiter lets them through before
        ``timeout_s``: ``{"columns": [...], "key", "probability", "table_size", "priority",
        "times_sampled"}`` (arrays, items on the leading axis), or ``None`` if none came."""
        num_items, timeout_s = check_num_items(num_items), check_timeout(timeout_s)
        taken = self._table(table).sample(num_items, time.monotonic() + timeout_s)
        if not taken:
            return None
        return {
            "columns": _stack([data for *_, data in taken]),
            "key": np.array([t[0] for t in taken], np.uint64),
            "probability": np.array([t[3] for t in taken], np.float64),
            "table_size": np.array([t[4] for t in taken], np.int64),
            "priority": np.array([t[1] for t in taken], np.float64),
            "times_sampled": np.array([t[2] for t in taken], np.int32),
        }

    def mutate_priorities(self, table: str, updates: dict | None = None, deletes: list | None = None) -> None:
        """Sets the priorities of the items ``updates`` names (``{key: priority}``) and deletes
        ``deletes``; keys no longer in the table are ignored."""
        clean = {int(k): float(v) for k, v in (updates or {}).items()}
        check_priorities(list(clean.values()))  # (the rule inserts follow too)
        self._table(table).mutate(clean, [int(k) for k in (deletes or [])])

    def server_info(self) -> dict[str, dict[str, Any]]:
        """Each table's size and counts (``Table.info``)."""
        return {name: table.info() for name, table in self._tables.items()}

    def table_signatures(self) -> dict[str, Any]:
        """Each table's signature as plain data (``_spec_record``)."""
        return {name: _spec_record(table.spec.signature) for name, table in self._tables.items()}

    # -- same-host bulk data (shoal.replay.native.shared) -----------------------------------------
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
        # segment meanwhile. Then each step is copied out on its own: the segment is the writer's
        # again once this call returns, and a step's memory goes with it, whichever order the
        # remover takes them in)
        timeout_s = check_timeout(timeout_s)
        groups = [
            [indices, [np.array(v) if v.dtype.kind in "fc" else v for v in mapping.views(places)]]
            for indices, places in steps
        ]
        call = self._checker.check_insert(groups, items, release, self._held(writer))
        for indices, columns, _ in call.groups:
            for k, index in enumerate(indices):
                self._store.add((writer, index), [np.array(c[k : k + 1]) for c in columns])
        return self._insert(writer, call.tables, call.priorities, call.step_lists, call.release, timeout_s)

    def sample_shared(self, table: str, num_items: int, timeout_s: float, segment: str) -> dict[str, Any] | None:
        """``sample``, its columns laid in ``segment`` (``"places"`` says where; ``"columns"`` is
        then ``None``); in the reply itself if they do not fit or the segment is not mapped here."""
        served = self.sample(table, num_items, timeout_s)
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
            self._store.release([s for _, items in states.values() for _, item in items for s in item.steps])

    def _write_checkpoint(self, states: dict[str, tuple[dict[str, Any], list[tuple[int, Item]]]]) -> str:
        assert self._checkpoint_dir is not None  # (checkpoint() refuses a server without one)
        step_ids = list(dict.fromkeys(s for _, items in states.values() for _, item in items for s in item.steps))
        columns = self._store.get(step_ids)
        layouts: dict[tuple, list[int]] = {}  # (shapes, dtypes) -> positions in step_ids
        for position, step in enumerate(columns):
            layouts.setdefault(tuple((c.shape, c.dtype.str) for c in step), []).append(position)
        where: dict[Any, list[int]] = {}
        arrays: dict[str, np.ndarray] = {}
        for number, positions in enumerate(layouts.values()):
            for row, position in enumerate(positions):
                where[step_ids[position]] = [number, row]
            for c in range(len(columns[positions[0]])):
                arrays[f"l{number}_c{c}"] = np.concatenate([columns[p][c] for p in positions])
        record = {
            "format": 1,
            "tables": {
                name: {
                    "counts": counts,
                    "items": [
                        [key, item.priority, item.times_sampled, [where[s] for s in item.steps]] for key, item in items
                    ],
                }
                for name, (counts, items) in states.items()
            },
            "layouts": [len(columns[positions[0]]) for positions in layouts.values()],
        }
        os.makedirs(self._checkpoint_dir, exist_ok=True)
        name = f"{time.time_ns():020d}"
        final = os.path.join(self._checkpoint_dir, name)
        partial = os.path.join(self._checkpoint_dir, f".{name}.partial")
        os.mkdir(partial)
        try:
            with open(os.path.join(partial, "steps.npz"), "wb") as f:
                np.savez(f, **arrays)
            with open(os.path.join(partial, "tables.json"), "w") as f:
                json.dump(record, f, allow_nan=False)
            os.rename(partial, final)
            with open(os.path.join(final, "DONE"), "w"):
                pass
        except BaseException:
            shutil.rmtree(partial, ignore_errors=True)
            raise
        return final

    def _restore(self, path: str) -> None:
        """Puts back the checkpoint at ``path`` (checked through first: ``checkpoint_files``)."""
        from shoal.replay.native.checkpoint_files import read_checkpoint

        record, blocks = read_checkpoint(path, self._checker)
        top = 0
        for name, saved in record["tables"].items():
            items = []
            for key, priority, times_sampled, steps in saved["items"]:
                ids = []
                for number, row in steps:
                    step_id = ("checkpoint", int(number), int(row))
                    if step_id not in self._store:
                        self._store.add_rows([step_id], blocks[int(number)], [int(row)])
                    ids.append(step_id)
                items.append((int(key), Item(self._store.hold(ids), float(priority), int(times_sampled))))
                top = max(top, int(key))
            self._tables[name].restore(saved["counts"], items)
        # (each step was added with one reference for a writer; no writer holds them now)
        self._store.let_go(list({s for t in self._tables.values() for item in t.items.values() for s in item.steps}))
        self._keys = iter(range(top + 1, 1 << 62))


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


def _stack(items: list[list[tuple[list | None, list, slice, int]]]) -> list[np.ndarray]:
    """Items (each its steps as ``StepStore.pieces``) -> one array per column with the items on
    the leading axis; length-1 items squeezed, else ``[items, length, ...]``."""
    lengths = {sum(count for *_, count in item) for item in items}
    if len(lengths) > 1:
        raise ValueError("items of one sample differ in length; a table's items must all have one length")
    length = lengths.pop()
    runs = [run for item in items for run in item]
    columns = [
        np.concatenate([c[j] if block is None or count == 1 else block[j][rows] for block, c, rows, count in runs])
        for j in range(len(runs[0][1]))
    ]
    if length == 1:
        return columns
    return [column.reshape(len(items), length, *column.shape[1:]) for column in columns]


__all__ = ["NativeReplayServer", "ReplayClosed", "SERVICE_METHODS", "StepStore"]
