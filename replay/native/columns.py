"""``ColumnStore``: the native replay's steps in preallocated per-field arrays.

Steps of one *layout* (their columns' dtypes and per-step shapes) live in one ``Lane``: an array
per column, ``[capacity, *step_shape]``, whose rows are handed out and taken back by a free list.
A step is a row; an item is the rows of its steps (``Rows``: a lane and its rows), so items
that overlap (R2D2's sequences with ``sequence_period < length``, consecutive n-step
transitions) share rows, never copies. Each row has a reference count: the items that use it,
plus one while its writer holds it; a row whose count reaches 0 goes back to the free list.

Sampling gathers a batch of items with one fancy-index per column (``gather``): ``[B, ...]`` for
one-step items, ``[B, length, ...]`` for longer ones. A lane grows (by half) when its rows run
out; ``reserve`` sizes it up front from the tables that will use it (``max_size`` times the item
length), so that a table filled to ``max_size`` costs its raw bytes plus the writers' windows.

Frame stacks are stored once (``shoal.replay.native.frames``): a column of images (uint8, its
last two axes at least ``MIN_PLANE_BYTES``: Atari's ``[4, 84, 84]`` stacks) keeps per row the
indices of its planes in a content-addressed pool of single frames, so that a frame shown by four
stacked observations and by n-step next observations is kept once; a gather rebuilds the
stacks bit for bit (``pool.frames[indices]``). ``ColumnStore(frames=False)`` (or the module's
``FRAMES``) keeps every column as it comes.

Writers name steps by ids (``(writer, index)``); the store maps the ids of steps a writer still
holds to rows (``hold`` makes an item of them). A writer's own reference goes once (``let_go``),
however often a call lets go of the step, and the id with it: an item's rows are never freed
under it. Thread-safe: one lock guards the lanes (writes into rows, growth, gathers are all short
copies).
"""

from __future__ import annotations

import mmap
import sys
import threading
from collections.abc import Hashable, Sequence
from typing import Any, NamedTuple

import numpy as np

from shoal.replay.native.frames import FramePool, is_frames

Layout = tuple  # ((dtype str, step shape), ...) per column
MIN_ROWS = 1024
_MAP_NORESERVE = 0x4000 if sys.platform.startswith("linux") else 0  # (Python < 3.13 names it not)
SMALL = 8  # index arrays up to this long are counted with plain indexing
FRAMES = True  # image columns kept as pooled frames (``ColumnStore(frames=None)`` reads it)


def _allocate(shape: tuple, dtype: np.dtype) -> np.ndarray:
    """An uninitialised array; a large one in an anonymous mapping of its own, whose pages the
    kernel supplies as rows are first written (numpy's allocator asks large arrays for
    transparent huge pages, whose first touch can cost milliseconds per row while the kernel
    compacts memory: measured 2.1 ms against 0.34 ms per 450 KB row here)."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if nbytes < 1 << 20:
        return np.empty(shape, dtype)
    # (no swap space reserved for the whole of it: a table sized for 1M Atari steps maps its
    # columns at once and takes memory only as they fill, as a store of separate steps did)
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | getattr(mmap, "MAP_NORESERVE", _MAP_NORESERVE)
    return np.frombuffer(mmap.mmap(-1, nbytes, flags=flags), dtype).reshape(shape)


def _add(refs: np.ndarray, rows: np.ndarray | Sequence[int], value: int) -> None:
    """``refs[rows] += value``, each occurrence of a row counted."""
    if len(rows) <= SMALL:
        for row in rows.tolist() if isinstance(rows, np.ndarray) else rows:
            refs[row] += value
    else:
        np.add.at(refs, np.asarray(rows, np.int64), value)


def layout_of(columns: Sequence[np.ndarray]) -> Layout:
    """The layout of steps whose columns are ``columns`` (the steps on their leading axis)."""
    return tuple([(c.dtype.str, c.shape[1:]) for c in columns])


def _with_room(reserved: int) -> int:
    """Rows for a lane of ``reserved`` rows and a little room for the writers' windows."""
    return max(MIN_ROWS, reserved + max(64, reserved // 32))


class Pooled(NamedTuple):
    """A column of frame stacks kept as its distinct frames once: row ``i`` is
    ``frames[indices[i]]`` (``indices`` ``[rows, *stack]``, ``frames`` ``[count, height, width]``)."""

    frames: np.ndarray
    indices: np.ndarray

    def rebuilt(self, start: int, stop: int) -> np.ndarray:
        """Rows ``start:stop`` of the column, their stacks rebuilt."""
        return self.frames[self.indices[start:stop]]


class Rows:
    """An item's steps: rows ``index`` (oldest first) of lane ``lane``; a one-step item's
    ``index`` is its row as a plain int (a table holds many: 28 bytes, not an array's 112)."""

    __slots__ = ("lane", "index")

    def __init__(self, lane: int, index: np.ndarray | int) -> None:
        self.lane, self.index = lane, index

    @property
    def array(self) -> np.ndarray:
        """The rows as an int64 array."""
        index = self.index
        return np.array([index], np.int64) if isinstance(index, int) else index

    def __len__(self) -> int:
        return 1 if isinstance(self.index, int) else len(self.index)


def _planes(layout: Layout, frames: bool) -> list[tuple | None]:
    """Per column of ``layout``: the shape of its pooled frames, or ``None`` (kept as it comes)."""
    return [tuple(shape[-2:]) if frames and is_frames(dtype, shape) else None for dtype, shape in layout]


class Lane:
    """The rows of one layout: an array per column, reference counts, the ids of held rows. A
    column of pooled frames (``planes[c]`` their shape) holds per row its planes' frame indices
    (int32, ``[capacity, *shape[:-2]]``) into ``pools[c]``."""

    def __init__(self, layout: Layout, capacity: int, pools: Sequence[FramePool | None] = ()) -> None:
        self.layout = layout
        self.checked = tuple((shape, dtype) for dtype, shape in layout)  # (the insert checker's order)
        self.pools = list(pools) or [None] * len(layout)
        self.plain = all(pool is None for pool in self.pools)  # (no column of pooled frames)
        self.columns = [
            _allocate((capacity, *shape), np.dtype(dtype))
            if pool is None
            else _allocate((capacity, *shape[:-2]), np.dtype(np.int32))
            for (dtype, shape), pool in zip(layout, self.pools)
        ]
        self.refs = np.zeros(capacity, np.int64)
        self.writer = np.zeros(capacity, bool)  # the row's writer still holds it (one reference)
        self.ids: list[Hashable | None] = [None] * capacity
        self.free = np.arange(capacity - 1, -1, -1, dtype=np.int64)  # a stack: free[:top]
        self.top = capacity

    @property
    def capacity(self) -> int:
        return len(self.refs)

    def write(self, rows: np.ndarray | int, block: list, picked: np.ndarray | int | None) -> None:
        """Rows ``rows`` get the steps ``picked`` of ``block`` (all of it for ``None``; one step
        for ints); a column of pooled frames gets its planes' frames (a reference each)."""
        for column, source, pool in zip(self.columns, block, self.pools):
            part = source if picked is None else source[picked]
            if pool is None:
                column[rows] = part
            else:
                frames = pool.put(part.reshape(-1, *pool.shape))
                lead = column.shape[1:]
                column[rows] = frames.reshape(lead if isinstance(rows, int) else (len(rows), *lead))

    def read(self, index: np.ndarray) -> list[np.ndarray]:
        """Rows ``index``'s columns, pooled frames rebuilt (one gather of frames per column)."""
        return [
            column[index] if pool is None else pool.frames[column[index]]
            for column, pool in zip(self.columns, self.pools)
        ]

    def read_pooled(self, index: np.ndarray) -> list[Any]:
        """Rows ``index``'s columns as a checkpoint keeps them: a column of pooled frames as
        ``Pooled`` (the distinct frames its rows show, once, and per row their indices into them),
        the others as arrays."""
        out: list[Any] = []
        for column, pool in zip(self.columns, self.pools):
            if pool is None:
                out.append(column[index])
                continue
            shown = column[index]
            distinct, inverse = np.unique(shown, return_inverse=True)
            out.append(Pooled(pool.frames[distinct], inverse.reshape(shown.shape).astype(np.int32)))
        return out

    def drop_frames(self, rows: np.ndarray | list[int]) -> None:
        """Rows ``rows`` (freed) let go of their frames."""
        for column, pool in zip(self.columns, self.pools):
            if pool is not None:
                pool.release(column[np.asarray(rows, np.int64)].reshape(-1))

    def grow(self, capacity: int) -> None:
        old = self.capacity
        if capacity <= old:
            return
        columns = []
        for column in self.columns:
            grown = _allocate((capacity, *column.shape[1:]), column.dtype)
            grown[:old] = column
            columns.append(grown)
        self.columns = columns
        self.refs = np.concatenate([self.refs, np.zeros(capacity - old, np.int64)])
        self.writer = np.concatenate([self.writer, np.zeros(capacity - old, bool)])
        self.ids.extend([None] * (capacity - old))
        added = np.arange(capacity - 1, old - 1, -1, dtype=np.int64)
        self.free = np.concatenate([added, self.free[: self.top]])
        self.top = len(self.free)

    def _room_for(self, count: int) -> None:
        if count > self.top:  # (grown by half, or by what is asked)
            self.grow(max(self.capacity + count, self.capacity * 3 // 2, MIN_ROWS))

    def take(self, count: int) -> np.ndarray:
        """``count`` free rows (growing the lane if it has fewer)."""
        self._room_for(count)
        self.top -= count
        return self.free[self.top : self.top + count][::-1].copy()

    def take_one(self) -> int:
        """One free row, as a plain int."""
        self._room_for(1)
        self.top -= 1
        return int(self.free[self.top])

    def give_back_one(self, row: int) -> None:
        if self.top == len(self.free):
            self.give_back([row])
        else:
            self.free[self.top] = row
            self.top += 1

    def give_back(self, rows: np.ndarray | list[int]) -> None:
        end = self.top + len(rows)
        if end > len(self.free):
            self.free = np.concatenate([self.free, np.empty(end - len(self.free), np.int64)])
        self.free[self.top : end] = rows[::-1]
        self.top = end


class ColumnStore:
    """Steps in lanes of preallocated columns (module docstring)."""

    def __init__(self, frames: bool | None = None) -> None:
        self._lanes: list[Lane] = []
        self._lane_of: dict[Layout, int] = {}
        self._where: dict[Hashable, tuple[int, int]] = {}  # step id -> (lane, row)
        self._reserved: dict[Layout, int] = {}
        self._frames = FRAMES if frames is None else bool(frames)
        self._pools: dict[tuple, FramePool] = {}  # plane shape -> its frames
        self._frames_reserved: dict[tuple, int] = {}
        self._lock = threading.Lock()
        self._last_item: tuple[int, list[tuple[np.dtype, tuple]]] | None = None  # (add_item_step's)

    # -- writes ------------------------------------------------------------------------------------
    def reserve(self, layout: Layout, rows: int) -> None:
        """Makes room for ``rows`` more rows of ``layout`` once its lane is made (or now)."""
        with self._lock:
            self._reserved[layout] = self._reserved.get(layout, 0) + int(rows)
            for (_, shape), plane in zip(layout, _planes(layout, self._frames)):
                if plane is not None:  # (at most one frame per plane: the bound, mapped not taken)
                    count = int(np.prod(shape[:-2], dtype=np.int64)) * int(rows)
                    self._frames_reserved[plane] = self._frames_reserved.get(plane, 0) + count
            lane = self._lane_of.get(layout)
            if lane is not None:
                self._lanes[lane].grow(_with_room(self._reserved[layout]))

    def _pool(self, plane: tuple) -> FramePool:
        pool = self._pools.get(plane)
        if pool is None:
            reserved = _with_room(self._frames_reserved.get(plane, 0))
            try:
                pool = FramePool(plane, reserved, _allocate)
            except (OSError, MemoryError):  # (a system that maps no more than it has: grow as it fills)
                pool = FramePool(plane, MIN_ROWS, _allocate)
            self._pools[plane] = pool
        return pool

    def _lane(self, layout: Layout) -> int:
        lane = self._lane_of.get(layout)
        if lane is None:
            lane = self._lane_of[layout] = len(self._lanes)
            pools = [None if plane is None else self._pool(plane) for plane in _planes(layout, self._frames)]
            try:
                made = Lane(layout, _with_room(self._reserved.get(layout, 0)), pools)
            except (OSError, MemoryError):  # (a system that maps no more than it has: grow as it fills)
                made = Lane(layout, MIN_ROWS, pools)
            self._lanes.append(made)
        return lane

    def add(self, step_id: Hashable, columns: list) -> None:
        """One step whose columns have a leading axis of 1."""
        self.add_rows([step_id], columns)

    def add_rows(self, step_ids: Sequence[Hashable], block: list, rows: Sequence[int] | None = None) -> None:
        """Steps ``step_ids`` are rows ``rows`` (default ``0, 1, ...``) of ``block`` (one array per
        column, the steps on the leading axis); each is copied into a row held for its writer."""
        count = len(step_ids)
        if not count:
            return
        with self._lock:
            lane_number = self._lane(layout_of(block))
            lane = self._lanes[lane_number]
            if count == 1:  # (one step: plain indexing, no index arrays)
                row = lane.take_one()
                lane.write(row, block, 0 if rows is None else int(rows[0]))
                lane.refs[row] = 1
                lane.writer[row] = True
                step_id = step_ids[0]
                old = self._where.get(step_id)
                if old is not None:
                    self._let_go_row(old[0], old[1])
                self._where[step_id] = (lane_number, row)
                lane.ids[row] = step_id
                return
            taken = lane.take(count)
            if rows is None and len(block[0]) == count:
                lane.write(taken, block, None)
            else:
                lane.write(taken, block, np.arange(count) if rows is None else np.asarray(rows, np.int64))
            lane.refs[taken] = 1
            lane.writer[taken] = True
            where, ids = self._where, lane.ids
            for step_id, row in zip(step_ids, taken.tolist()):
                old = where.get(step_id)
                if old is not None:  # (a step id sent again: its old row loses the writer's hold)
                    self._let_go_row(old[0], old[1])
                where[step_id] = (lane_number, row)
                ids[row] = step_id

    def add_item_step(self, columns: list) -> tuple[int, int]:
        """One step (``columns`` without a leading axis), copied into a row held by one item
        alone (no writer holds it, no id names it): a one-step item's ``(lane, row)``, for
        ``Table.insert_row`` (``release_row`` it if the item is not inserted)."""
        with self._lock:
            last = self._last_item  # (the lane of the last call's layout: its dtypes and shapes)
            if last is not None and len(columns) == len(last[1]):
                for column, (dtype, shape) in zip(columns, last[1]):
                    if column.dtype is not dtype or column.shape != shape:
                        last = None
                        break
            else:
                last = None
            if last is None:
                lane_number = self._lane(tuple([(c.dtype.str, c.shape) for c in columns]))
                last = self._last_item = (lane_number, [(c.dtype, c.shape) for c in columns])
            lane = self._lanes[last[0]]
            row = lane.take_one()
            if not lane.plain:
                lane.write(row, [c[np.newaxis] for c in columns], 0)
            else:  # (plain columns: one copy each into the row)
                for column, source in zip(lane.columns, columns):
                    column[row] = source
            lane.refs[row] = 1
            return last[0], row

    def add_item_steps(self, block: list) -> tuple[int, np.ndarray]:
        """Steps that are the rows of ``block`` (one array per column, the steps on the leading
        axis), each copied into a row held by one item alone (``add_item_step`` for a whole
        message of one-step items: one copy per column): ``(lane, rows)``, for
        ``Table.insert_many`` (``release_rows`` those of items not inserted)."""
        with self._lock:
            lane_number = self._lane(layout_of(block))
            lane = self._lanes[lane_number]
            taken = lane.take(len(block[0]))
            lane.write(taken, block, None)
            lane.refs[taken] = 1
            return lane_number, taken

    # -- references --------------------------------------------------------------------------------
    def hold(self, steps: Sequence[Hashable] | Rows) -> Rows:
        """One more reference to ``steps`` (step ids, or an item's ``Rows``): their ``Rows``."""
        with self._lock:
            if isinstance(steps, Rows):
                _add(self._lanes[steps.lane].refs, steps.array, 1)
                return steps
            if len(steps) == 1:
                place = self._where.get(steps[0])
                if place is not None:
                    self._lanes[place[0]].refs[place[1]] += 1
                    return Rows(place[0], place[1])
            where = self._where
            try:
                places = [where[s] for s in steps]
            except KeyError:
                missing = [s for s in steps if s not in where]
                raise KeyError(f"an item references steps the server does not hold: {missing[:3]}") from None
            lanes, rows = zip(*places)
            lane = lanes[0]
            if lanes.count(lane) != len(lanes):
                raise ValueError("an item's steps must all have one layout (dtypes and shapes)")
            _add(self._lanes[lane].refs, rows, 1)
            return Rows(lane, np.array(rows, np.int64))

    def hold_rows(self, lane: int, rows: np.ndarray) -> None:
        """One more reference to rows ``rows`` of lane ``lane`` (an item's, held again)."""
        with self._lock:
            _add(self._lanes[lane].refs, rows, 1)

    def release_rows(self, lane: int, rows: np.ndarray | list[int]) -> None:
        """One reference less to rows ``rows`` of lane ``lane`` (an item's, let go of)."""
        with self._lock:
            self._release_rows(lane, rows)

    def release_row(self, lane: int, row: int) -> None:
        """``release_rows`` of one row (a one-step item's), with plain indexing."""
        with self._lock:
            made = self._lanes[lane]
            refs = made.refs
            refs[row] -= 1
            if refs[row] <= 0:
                refs[row] = 0
                if not made.plain:
                    made.drop_frames([row])
                made.give_back_one(row)

    def release(self, steps: Rows) -> None:
        """One reference less to an item's rows (``hold``'s)."""
        with self._lock:
            index = steps.index
            self._release_rows(steps.lane, [index] if isinstance(index, int) else index)

    def let_go(self, step_ids: Sequence[Hashable]) -> None:
        """The writer that added ``step_ids`` holds them no more: each loses that one reference
        once (a step let go of twice, or never added, is left as it is)."""
        with self._lock:
            if len(step_ids) <= SMALL:
                for s in step_ids:
                    place = self._where.get(s)
                    if place is not None:
                        self._let_go_row(*place)
                return
            # (many: per lane at once; a held id names its writer's row, ``_let_go_row``)
            where = self._where
            by_lane: dict[int, list[int]] = {}
            for s in step_ids:
                place = where.pop(s, None)
                if place is not None:
                    by_lane.setdefault(place[0], []).append(place[1])
            for lane_number, rows in by_lane.items():
                lane = self._lanes[lane_number]
                index = np.array(rows, np.int64)
                held = index[lane.writer[index]]
                lane.writer[held] = False
                ids = lane.ids
                for row in held.tolist():
                    ids[row] = None
                self._release_rows(lane_number, held)

    def _let_go_row(self, lane_number: int, row: int) -> None:
        """The writer's reference to ``row`` goes, and with it the step's id: an item is made
        only of steps its writer holds, so an id let go of names nothing any more."""
        lane = self._lanes[lane_number]
        if lane.writer[row]:
            lane.writer[row] = False
            step_id = lane.ids[row]
            if step_id is not None and self._where.get(step_id) == (lane_number, row):
                del self._where[step_id]
            lane.ids[row] = None
            self._release_rows(lane_number, [row])

    def _release_rows(self, lane_number: int, rows: np.ndarray | list[int]) -> None:
        """One reference less to each of ``rows``; a row left with none goes back to the free
        list (its writer let go of it before, and with it of its id: ``_let_go_row``)."""
        refs = self._lanes[lane_number].refs
        if len(rows) <= SMALL:  # (a few rows: plain indexing beats ufunc.at and unique)
            freed: list[int] | np.ndarray = []
            for row in rows if isinstance(rows, list) else rows.tolist():
                refs[row] -= 1
                if refs[row] <= 0 and row not in freed:
                    freed.append(row)  # type: ignore[union-attr]
        else:
            rows = np.asarray(rows, np.int64)
            np.subtract.at(refs, rows, 1)
            freed = np.unique(rows[refs[rows] <= 0])
        if len(freed):
            refs[freed] = 0
            lane = self._lanes[lane_number]
            lane.drop_frames(freed)
            lane.give_back(freed)

    # -- reads -------------------------------------------------------------------------------------
    def gather(self, items: Sequence[Rows]) -> list[np.ndarray]:
        """The items' columns: one gather per column, ``[len(items), ...]`` for one-step items,
        ``[len(items), length, ...]`` for longer ones (items of one sample have one length)."""
        indices = [item.index for item in items]
        if all(isinstance(i, int) for i in indices):  # (one-step items)
            index, length = np.array(indices, np.int64), 1
        else:
            arrays = [item.array for item in items]
            index, length = np.concatenate(arrays), len(arrays[0])
            if any(len(i) != length for i in arrays):
                raise ValueError("items of one sample differ in length; a table's items must all have one length")
        with self._lock:
            lanes = {item.lane for item in items}
            if len(lanes) == 1:
                lane = self._lanes[lanes.pop()]
                out = lane.read(index)
            else:  # (items of several layouts in one table: stacked item by item)
                out = [
                    np.concatenate(parts) for parts in zip(*[self._lanes[item.lane].read(item.array) for item in items])
                ]
        if length == 1:
            return out
        return [column.reshape(len(items), length, *column.shape[1:]) for column in out]

    def gather_rows(self, lanes: np.ndarray, rows: np.ndarray) -> list[np.ndarray]:
        """A sample's columns: item ``i`` is rows ``rows[i]`` of lane ``lanes[i]`` (``rows``
        ``[B, length]``); one gather per column, ``[B, ...]`` for one-step items, ``[B, length,
        ...]`` for longer ones."""
        count, length = rows.shape
        with self._lock:
            first = int(lanes[0])
            if (lanes == first).all():
                out = self._lanes[first].read(rows.reshape(-1))
            else:  # (items of several layouts in one table: stacked item by item)
                parts = [self._lanes[int(lane)].read(index) for lane, index in zip(lanes.tolist(), rows)]
                out = [np.concatenate(columns) for columns in zip(*parts)]
        if length == 1:
            return out
        return [column.reshape(count, length, *column.shape[1:]) for column in out]

    def layouts(self, step_ids: Sequence[Hashable]) -> list[tuple | None]:
        """Each step's layout as the insert checker reads it (``(shape, dtype.str)`` per column),
        ``None`` for a step not held."""
        with self._lock:
            lanes = self._lanes
            return [None if (place := self._where.get(s)) is None else lanes[place[0]].checked for s in step_ids]

    def rows_by_lane(self, items: Sequence[tuple[int, np.ndarray]]) -> dict[int, tuple[np.ndarray, list[Any]]]:
        """For a checkpoint: per lane, the distinct rows ``items`` (``(lane, rows)`` each) use
        (sorted) and their columns (``Lane.read_pooled``: frame stacks as their frames once)."""
        with self._lock:
            used: dict[int, list[np.ndarray]] = {}
            for lane, rows in items:
                used.setdefault(int(lane), []).append(np.asarray(rows, np.int64).reshape(-1))
            out = {}
            for lane, parts in used.items():
                rows = np.unique(np.concatenate(parts))
                out[lane] = (rows, self._lanes[lane].read_pooled(rows))
            return out

    # -- accounting --------------------------------------------------------------------------------
    def __len__(self) -> int:
        with self._lock:
            return sum(lane.capacity - lane.top for lane in self._lanes)

    def __contains__(self, step_id: Any) -> bool:
        with self._lock:
            return step_id in self._where

    def nbytes(self) -> int:
        """Bytes the lanes' columns and the frame pools hold (allocated, used or not)."""
        with self._lock:
            pools = sum(pool.frames.nbytes + pool.refs.nbytes for pool in self._pools.values())
            return sum(c.nbytes for lane in self._lanes for c in lane.columns) + pools

    def used_bytes(self) -> int:
        """Bytes of the rows in use and of the frames held: what a full table costs."""
        with self._lock:
            rows = sum((lane.capacity - lane.top) * sum(c[0].nbytes for c in lane.columns) for lane in self._lanes)
            return rows + sum(len(pool) * pool.frames[0].nbytes for pool in self._pools.values())

    def frames_held(self) -> int:
        """Frames the pools hold (0 without image columns, or with ``frames=False``)."""
        with self._lock:
            return sum(len(pool) for pool in self._pools.values())


__all__ = ["ColumnStore", "Lane", "Pooled", "Rows", "layout_of"]
