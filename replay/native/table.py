"""A native replay table: items in arrays, their selectors, and Reverb's rate limiter.

An item is a reference to ``length`` steps of the server's step store (``ColumnStore``: rows of
its columns) plus its priority and how often it was sampled; items that overlap share their
steps (no copies). A table keeps its items in preallocated arrays indexed by *slot* (``Slots``:
key, priority, times sampled, lane, rows, insertion order), never one Python object per item,
and its selectors work on slots: a batch is sampled with one ``select_many``, its times sampled
counted, its metadata and rows read, all as array operations. An item's key names its slot:
``key = serial << shift | slot`` (``serial`` the table's insert count at its insert, ``shift``
the bits of ``max_size - 1``), so that a priority update finds its items without a dict.

The table has Reverb's semantics (``reverb/cc/table.cc``, ``rate_limiter.cc``) as Shoal uses
them:

* **Insert.** When the table holds ``max_size`` items, the remover's choice is deleted first.
  The rate limiter lets an insert through when ``size + 1 <= min_size_to_sample`` (until the
  table can be sampled, inserts are free) or when ``(inserts + 1) * samples_per_insert -
  samples <= max_diff``; otherwise the insert waits, at most its timeout.
* **Sample.** One item at a time, each when ``size >= min_size_to_sample`` and ``inserts *
  samples_per_insert - samples - 1 >= min_diff``; otherwise it waits, at most its timeout. The
  sampler picks the item, with its probability (``selectors``); an item sampled
  ``max_times_sampled`` times (if > 0) is deleted. Items the limiter lets through at once are
  drawn as one batch (the very draws one at a time would make).
* **Counts.** ``inserts``, ``samples`` and ``deletes`` (items removed by the remover or after
  their last sample) are what the limiter reads; they survive a checkpoint.
* **Priorities** change by key; keys no longer in the table are ignored (as in Reverb).

Beyond Reverb: sampling draws from a ``numpy.random.Generator`` seeded by the server, and a
*gated* table (the one-process runner's) samples only items it was granted (``grant``), so that
whatever thread samples, it does so at the same point of the run every time (a seeded run is
reproducible).
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from shoal.replay.native.selectors import last_of_each, make_selector, previous_of
from shoal.replay.native.validation import check_priorities
from shoal.replay.tables import TableSpec

MUTATION_WAIT_S = 60.0
MIN_SLOTS = 1024
MAX_SHIFT = 40  # (a key's slot bits at most: tables of up to 2**40 items)


class ReplayClosed(RuntimeError):
    """The replay server stopped while a call waited on one of its tables."""


class ReplayServerGone(ConnectionError):
    """The replay server stopped answering (it stopped, crashed, or the network went away)."""


@dataclasses.dataclass
class Sampled:
    """A sample's items, on the leading axis of each array (as sampled): their keys, priorities,
    times sampled (this sample counted), probabilities, the table's size when each was taken,
    and their steps' places in the store (``lanes``, ``rows`` ``[n, length]``)."""

    key: np.ndarray
    priority: np.ndarray
    times_sampled: np.ndarray
    probability: np.ndarray
    table_size: np.ndarray
    lanes: np.ndarray
    rows: np.ndarray

    def __len__(self) -> int:
        return len(self.key)


@dataclasses.dataclass
class Saved:
    """A table's items for a checkpoint, oldest inserted first: keys, priorities, times
    sampled, and each item's steps (``lanes`` and ``rows[i, :lengths[i]]`` in the store)."""

    key: np.ndarray
    priority: np.ndarray
    times_sampled: np.ndarray
    lanes: np.ndarray
    lengths: np.ndarray
    rows: np.ndarray

    def __len__(self) -> int:
        return len(self.key)

    def steps(self, i: int) -> tuple[int, np.ndarray]:
        """Item ``i``'s ``(lane, rows)``."""
        return int(self.lanes[i]), self.rows[i, : self.lengths[i]]


def _grown(array: np.ndarray, size: int, fill: int | float = 0) -> np.ndarray:
    """``array`` with ``size`` entries on its leading axis (new ones ``fill``)."""
    out = np.full((size, *array.shape[1:]), fill, array.dtype)
    out[: len(array)] = array
    return out


class Table:
    """One table of a ``NativeReplayServer`` (see the module docstring)."""

    def __init__(self, spec: TableSpec, store: Any, rng: np.random.Generator, gated: bool = False) -> None:
        self.spec, self._store, self._rng = spec, store, rng
        self._sampler = make_selector(spec.sampler, spec.priority_exponent)
        self._remover = make_selector(spec.remover, spec.priority_exponent)
        self._shift = min(MAX_SHIFT, max(1, (int(spec.max_size) - 1).bit_length()))
        self._slot_limit = min(int(spec.max_size), 1 << self._shift)
        capacity = min(self._slot_limit, MIN_SLOTS)
        # (per slot: key 0 = free; serial = the insert count at its insert, for the order)
        self._key = np.zeros(capacity, np.int64)
        self._serial = np.zeros(capacity, np.int64)
        self._priority = np.zeros(capacity, np.float64)
        self._times = np.zeros(capacity, np.int64)
        self._lane = np.zeros(capacity, np.int32)
        self._length = np.zeros(capacity, np.int32)
        self._rows = np.zeros((capacity, 1), np.int64)
        self._free = np.arange(capacity - 1, -1, -1, dtype=np.int64)  # a stack: free[:top]
        self._top = capacity
        self._size = 0
        self._one_length = True  # (every item put so far has the rows array's width)
        self._foreign: dict[int, int] = {}  # (restored keys that do not name their slot) key -> slot
        self.inserts = self.samples = self.deletes = 0
        self.mutations = 0  # calls of mutate (priority updates)
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._waiting = 0  # calls waiting on _changed (no one to wake: no notify, ~1 us a call)
        self._closed = False
        self.gated = gated
        self._granted = 0  # (gated) items the sampler may take now
        self._mutations_wanted = 0  # (gated) priority updates to wait for before those samples
        self._wait_for_mutations = True
        self._mutations_waited_since: float | None = None

    def __len__(self) -> int:
        return self._size

    # -- slots -----------------------------------------------------------------------------------
    def _take_slot(self) -> int:
        if not self._top:
            self._grow(min(self._slot_limit, 2 * len(self._key)))
        self._top -= 1
        return int(self._free[self._top])

    def _grow(self, capacity: int) -> None:
        old = len(self._key)
        if capacity <= old:
            raise RuntimeError(f"replay table '{self.spec.name}' has no free slot (max_size {self.spec.max_size})")
        for name in ("_key", "_serial", "_priority", "_times", "_lane", "_length", "_rows"):
            setattr(self, name, _grown(getattr(self, name), capacity))
        # (the free stack holds every slot at most: ``capacity`` entries, the new slots at the
        # bottom, the free old ones on top, taken first)
        free = np.empty(capacity, np.int64)
        free[: capacity - old] = np.arange(capacity - 1, old - 1, -1, dtype=np.int64)
        free[capacity - old : capacity - old + self._top] = self._free[: self._top]
        self._free, self._top = free, capacity - old + self._top

    def _width(self, length: int) -> None:
        if length != self._rows.shape[1] and (self._size or self.inserts or len(self._foreign)):
            self._one_length = False
        if length > self._rows.shape[1]:
            rows = np.zeros((len(self._rows), length), np.int64)
            rows[:, : self._rows.shape[1]] = self._rows
            self._rows = rows

    def _put(self, slot: int, key: int, serial: int, lane: int, rows: Any, priority: float, times: int = 0) -> None:
        """Item ``key`` in ``slot`` (its steps held for it), known to the selectors."""
        if isinstance(rows, int) and self._one_length and self._rows.shape[1] == 1:  # (one step: a row)
            self._rows[slot, 0] = rows
            length = 1
        else:
            length = 1 if not isinstance(rows, np.ndarray) else len(rows)
            if length != self._rows.shape[1]:
                self._width(length)
            self._rows[slot, :length] = rows
        self._key[slot], self._serial[slot], self._priority[slot] = key, serial, priority
        self._times[slot], self._lane[slot], self._length[slot] = times, lane, length
        self._sampler.insert(slot, priority)
        self._remover.insert(slot, priority)
        self._size += 1

    def _slots_of(self, keys: np.ndarray) -> np.ndarray:
        """The slots of items ``keys`` (-1 for a key no longer in the table)."""
        slots = keys & ((1 << self._shift) - 1)
        inside = (keys > 0) & (slots < len(self._key))
        slots = np.where(inside, slots, 0)
        slots = np.where(inside & (self._key[slots] == keys), slots, -1)
        if self._foreign:
            for i in np.flatnonzero(slots < 0).tolist():
                slots[i] = self._foreign.get(int(keys[i]), -1)
        return slots

    # -- the rate limiter (Reverb's RateLimiter::CanInsert / CanSample) --------------------------
    def _can_insert(self) -> bool:
        limit = self.spec.rate_limit
        if self.inserts + 1 - self.deletes <= limit.min_size_to_sample:
            return True
        return (self.inserts + 1) * limit.samples_per_insert - self.samples <= limit.max_diff

    def _can_sample(self, num_items: int = 1) -> bool:
        limit = self.spec.rate_limit
        if self.inserts - self.deletes < limit.min_size_to_sample:
            return False
        return self.inserts * limit.samples_per_insert - self.samples - num_items >= limit.min_diff

    def _wake(self) -> None:
        """(Under the lock) wakes the calls waiting on this table, if any."""
        if self._waiting:
            self._changed.notify_all()

    def can_sample(self, num_items: int) -> bool:
        with self._lock:
            return self._can_sample(num_items)

    def _wait(self, ready: Callable[[], bool], deadline: float) -> bool:
        """Waits until ``ready()`` (under the lock) or the deadline; False when it passed."""
        while not ready():
            if self._closed:
                raise ReplayClosed(f"replay table '{self.spec.name}' was closed")
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self._changed.notify_all()  # (what this call changed so far may release another)
            self._waiting += 1
            try:
                self._changed.wait(left)
            finally:
                self._waiting -= 1
        if self._closed:
            raise ReplayClosed(f"replay table '{self.spec.name}' was closed")
        return True

    # -- insert / sample / mutate ----------------------------------------------------------------
    def insert(self, steps: Any, priority: float, deadline: float) -> bool:
        """Inserts the item (its steps already held in the store for it: ``Rows``); False when
        the rate limiter held it back until ``deadline`` (nothing was inserted)."""
        return self.insert_many([(steps, priority)], deadline) == 1

    def insert_many(self, items: list[tuple[Any, float]], deadline: float) -> int:
        """Inserts ``(steps, priority)`` items in order (their steps already held in the store
        for them: ``Rows``), each as the rate limiter lets it through before ``deadline``, under
        one hold of the lock; returns how many went in (the rest were held back)."""
        if len(items) == 1 and isinstance(items[0][0].index, int):  # (one one-step item)
            steps, priority = items[0]
            return int(self.insert_row(steps.lane, steps.index, priority, deadline))
        check_priorities([priority for _, priority in items])  # (before anything moves: the table untouched)
        release: list[tuple[int, Any]] = []
        try:
            with self._lock:
                for done, (steps, priority) in enumerate(items):
                    if not self._wait(self._can_insert, deadline):
                        self._wake()
                        return done
                    if self._size >= self.spec.max_size:
                        self._delete(self._remover.select(self._rng)[0], release)
                    slot, serial = self._take_slot(), self.inserts + 1
                    key = serial << self._shift | slot
                    while self._foreign and key in self._foreign:  # (a restored key: one not reused)
                        serial += 1 << 20
                        key = serial << self._shift | slot
                    self._put(slot, key, serial, steps.lane, steps.index, float(priority))
                    self.inserts += 1
                self._wake()
                return len(items)
        finally:
            self._release(release)

    def insert_row(self, lane: int, row: int, priority: float, deadline: float) -> bool:
        """``insert_many`` of one one-step item (row ``row`` of lane ``lane``, held in the store
        for it) with nothing else to do: ``NativeWriter.append_item``'s call in one process.
        False when the rate limiter held it back until ``deadline`` (nothing was inserted); a
        priority that is not a finite number >= 0 is a ``ValueError``, the table untouched."""
        if not 0.0 <= priority < math.inf:  # (a NaN fails both: checked before anything moves)
            raise ValueError(f"priorities must be finite numbers >= 0, got {priority}")
        removed_lane, removed = -1, None
        with self._lock:
            if (self._closed or not self._can_insert()) and not self._wait(self._can_insert, deadline):
                self._wake()
                return False
            if self._size >= self.spec.max_size:  # (the removed item's slot is the one taken next)
                slot = self._remover.select(self._rng)[0]
                length = int(self._length[slot])
                removed_lane = int(self._lane[slot])
                removed = int(self._rows[slot, 0]) if length == 1 else self._rows[slot, :length].copy()
                self._sampler.delete(slot)
                self._remover.delete(slot)
                if self._foreign:
                    self._foreign.pop(int(self._key[slot]), None)
                self._size -= 1
                self.deletes += 1
            else:
                slot = self._take_slot()
            serial = self.inserts + 1
            key = serial << self._shift | slot
            while self._foreign and key in self._foreign:  # (a restored key: one not reused)
                serial += 1 << 20
                key = serial << self._shift | slot
            self._put(slot, key, serial, lane, row, float(priority))
            self.inserts += 1
            if self._waiting:
                self._changed.notify_all()
        if isinstance(removed, int):  # (its rows let go of outside the table's lock, as insert_many's)
            self._store.release_row(removed_lane, removed)
        elif removed is not None:
            self._store.release_rows(removed_lane, removed)
        return True

    def insert_rows(self, lane: int, rows: np.ndarray, priorities: list[float], deadline: float) -> int:
        """One-step items of rows ``rows`` of lane ``lane`` (held in the store for them) with
        ``priorities``, in order: the items, rate limiter decisions, counts and removals of
        ``insert_many``, but a run at a time: as many items as the limiter lets through now go
        in with array operations (slots, keys, selectors; a full table's removals chosen for
        the run at once, ``_put_run``). A table that holds restored keys or longer items takes
        them one at a time (``insert_many``). Returns how many went in (the rest were held back)."""
        if self._foreign or self._rows.shape[1] != 1:
            items = [(_OneRow(lane, row), p) for row, p in zip(rows.tolist(), priorities)]
            return self.insert_many(items, deadline)
        release: list[tuple[int, Any]] = []
        done, total = 0, len(rows)
        try:
            with self._lock:
                while done < total:
                    if not self._wait(self._can_insert, deadline):
                        self._wake()
                        return done
                    count = self._insert_room(total - done)
                    self._put_run(lane, rows[done : done + count], priorities[done : done + count], release)
                    done += count
                self._wake()
                return total
        finally:
            self._release(release)

    def _insert_room(self, wanted: int) -> int:
        """(Under the lock, ``_can_insert`` true) how many of ``wanted`` items the rate limiter
        lets in one after another now, each tested as ``_can_insert`` tests it, the removals of
        a full table counted (at most ``max_size`` in one run): item ``j``'s test in array
        operations for all ``j`` at once (the same integer and float arithmetic)."""
        limit, max_size = self.spec.rate_limit, self.spec.max_size
        cap = min(wanted, max_size)
        j = np.arange(cap, dtype=np.int64)
        inserts = self.inserts + 1 + j  # (the inserts counted once item j is in)
        deletes = self.deletes + np.maximum(0, j - (max_size - self._size))  # (a full table's removals before j)
        ok = (inserts - deletes <= limit.min_size_to_sample) | (
            inserts * limit.samples_per_insert - self.samples <= limit.max_diff
        )
        return cap if ok.all() else int(np.argmin(ok))

    def _put_run(self, lane: int, rows: np.ndarray, priorities: list[float], release: list) -> None:
        """(Under the lock) ``len(rows) <= max_size`` one-step items in, as ``insert_many`` puts
        them one at a time: those that fit take free slots; each of the rest removes the
        remover's choice and takes its slot (``remove_insert_many``: the same choices and draws,
        made for the whole run; an item of the run may be the one a later item removes). The
        removed items' rows are appended to ``release``."""
        count = len(rows)
        fresh = min(count, self.spec.max_size - self._size)
        weights = np.asarray(priorities, np.float64)
        serials = np.arange(self.inserts + 1, self.inserts + 1 + count, dtype=np.int64)
        if fresh:
            while self._top < fresh:
                self._grow(min(self._slot_limit, 2 * len(self._key)))
            taken = self._free[self._top - fresh : self._top][::-1].copy()
            self._top -= fresh
            self._set_items(taken, serials[:fresh], lane, rows[:fresh], weights[:fresh])
            self._sampler.insert_many(taken, weights[:fresh])
            self._remover.insert_many(taken, weights[:fresh])
            self._size += fresh
        if count > fresh:
            self._replace_run(lane, rows[fresh:], weights[fresh:], serials[fresh:], release)
        self.inserts += count

    def _replace_run(
        self, lane: int, rows: np.ndarray, weights: np.ndarray, serials: np.ndarray, release: list
    ) -> None:
        """(Under the lock, the table full) each new item removes the remover's choice and
        takes its slot, as one at a time: a slot chosen again holds the run's item that took it
        before, which is removed in its turn (its row released, its key never seen)."""
        slots = self._remover.remove_insert_many(self._rng, weights)
        ordered = np.sort(slots)
        distinct = bool((ordered[1:] != ordered[:-1]).all())
        self._sampler.replace_many(slots, weights, distinct)
        if distinct:  # (each removes an item there before the run)
            lanes, removed = self._lane[slots], self._rows[slots, 0].copy()
        else:  # (the item there before the run, else the run's item that took the slot before)
            before = previous_of(slots)
            first = before < 0
            lanes = np.where(first, self._lane[slots], lane)
            removed = np.where(first, self._rows[slots, 0], rows[np.maximum(before, 0)])
        if (lanes == lanes[0]).all():
            release.append((int(lanes[0]), removed))
        else:
            for old_lane in np.unique(lanes).tolist():
                release.append((old_lane, removed[lanes == old_lane]))
        if not distinct:
            last = last_of_each(slots)
            slots, serials, rows, weights = slots[last], serials[last], rows[last], weights[last]
        self._set_items(slots, serials, lane, rows, weights)
        self.deletes += len(ordered)

    def _set_items(
        self, slots: np.ndarray, serials: np.ndarray, lane: int, rows: np.ndarray, weights: np.ndarray
    ) -> None:
        """One-step items of ``rows`` in ``slots`` (arrays only: the selectors are the caller's)."""
        self._key[slots] = serials << self._shift | slots
        self._serial[slots], self._priority[slots], self._times[slots] = serials, weights, 0
        self._lane[slots], self._length[slots], self._rows[slots, 0] = lane, 1, rows

    def _delete(self, slot: int, release: list[tuple[int, Any]]) -> None:
        """Removes the item in ``slot``; its rows (a copy) are appended to ``release`` for the
        caller to let go of (``_release``) once it read what it needs."""
        length = int(self._length[slot])
        rows = [int(self._rows[slot, 0])] if length == 1 else self._rows[slot, :length].copy()
        release.append((int(self._lane[slot]), rows))
        self._drop(slot)

    def _drop(self, slot: int) -> None:
        """Removes the item in ``slot`` (its rows the caller's to let go of)."""
        self._sampler.delete(slot)
        self._remover.delete(slot)
        if self._foreign:
            self._foreign.pop(int(self._key[slot]), None)
        self._key[slot] = 0
        self._free[self._top] = slot
        self._top += 1
        self._size -= 1
        self.deletes += 1

    def _release(self, release: list[tuple[int, Any]]) -> None:
        for lane, rows in release:
            self._store.release_rows(lane, rows)

    def _next_is_ready(self) -> bool:
        """(Under the lock) whether one more item could be sampled now, without waiting."""
        if self.gated and (self._granted <= 0 or self.mutations < self._mutations_wanted):
            return False
        return self._can_sample()

    def _ready_now(self, wanted: int) -> int:
        """(Under the lock) how many of ``wanted`` items the limiter (and, gated, the grant) lets
        be sampled one after another right now: the items the per-item rule would take without
        waiting, as long as none is deleted on the way (``max_times_sampled`` 0)."""
        limit = self.spec.rate_limit
        if self.inserts - self.deletes < limit.min_size_to_sample:
            return 0
        if self.gated:
            if self._granted <= 0 or self.mutations < self._mutations_wanted:
                return 0
            wanted = min(wanted, self._granted)
        room = self.inserts * limit.samples_per_insert - self.samples - 1 - limit.min_diff
        if not room >= 0:
            return 0
        count = int(min(wanted, room + 1))
        # (exactly the per-item test, item `count - 1` passes and item `count` fails, in floats)
        while (
            count > 0 and not self.inserts * limit.samples_per_insert - (self.samples + count - 1) - 1 >= limit.min_diff
        ):
            count -= 1
        while count < wanted and self.inserts * limit.samples_per_insert - (self.samples + count) - 1 >= limit.min_diff:
            count += 1
        return count

    def _take(self, slots: np.ndarray, probabilities: np.ndarray) -> Sampled:
        """(Under the lock) items ``slots`` (a batch, repeats allowed) sampled: their times
        sampled counted in order, their metadata and rows read (copies)."""
        times, count = self._times, len(slots)
        ordered = np.sort(slots)
        if count == 1 or (ordered[1:] != ordered[:-1]).all():
            times[slots] += 1
            seen = times[slots]
        else:  # (a slot drawn k times in one batch shows times + 1, ..., times + k, as one by one)
            order = np.argsort(slots, kind="stable")
            starts = np.flatnonzero(np.concatenate([[True], ordered[1:] != ordered[:-1]]))
            rank = np.arange(count) - np.repeat(starts, np.diff(np.append(starts, count)))
            seen = np.empty(count, np.int64)
            seen[order] = times[ordered] + rank + 1
            np.add.at(times, slots, 1)
        self.samples += count
        if self.gated:
            self._granted -= count
        if self._one_length:  # (every item ever put has one length: no need to look)
            rows = self._rows[slots]
        else:
            lengths = self._length[slots]
            length = int(lengths[0])
            if (lengths != length).any():
                raise ValueError("items of one sample differ in length; a table's items must all have one length")
            rows = self._rows[slots, :length]
        return Sampled(
            self._key[slots],
            self._priority[slots],
            seen,
            probabilities,
            np.full(count, self._size, np.int64),
            self._lane[slots],
            rows,
        )

    def sample(
        self, num_items: int, deadline: float, min_items: int | None = None
    ) -> tuple[Sampled | None, list | None]:
        """Up to ``num_items`` items, each taken when the limiter allows it: their metadata
        (``Sampled``, arrays in the order sampled) and their columns (``ColumnStore.gather_rows``),
        or ``(None, None)`` when no item came. Fewer when ``deadline`` passed first, or, with
        ``min_items``, as soon as ``min_items`` were taken and the limiter holds the next one back
        (a sampler asking for several batches in one call waits only for the first). Items the
        limiter lets through at once are drawn as one batch (``select_many``: the same draws as
        one at a time); the rest one by one as the limiter admits them."""
        enough = num_items if min_items is None else min(max(1, min_items), num_items)
        parts: list[Sampled] = []
        taken = 0
        release: list[tuple[int, Any]] = []
        batched = self.spec.sampler in ("uniform", "prioritized") and not self.spec.max_times_sampled
        cap = self.spec.max_times_sampled
        try:
            with self._lock:
                while taken < num_items:
                    ready = self._ready_now(num_items - taken) if batched else 0
                    if ready >= 1:
                        slots, probabilities = self._sampler.select_many(self._rng, ready)
                        parts.append(self._take(slots, probabilities))
                        taken += ready
                        continue
                    if taken >= enough and not self._next_is_ready():  # (the rest would wait: not asked to)
                        break
                    if self.gated:
                        if not self._wait(lambda: self._can_sample() and self._granted > 0, deadline):
                            break
                        if not self._await_mutations(deadline):
                            break
                    elif not self._wait(self._can_sample, deadline):
                        break
                    slot, probability = self._sampler.select(self._rng)
                    parts.append(self._take(np.array([slot], np.int64), np.array([probability])))
                    taken += 1
                    if cap and self._times[slot] >= cap:
                        self._delete(slot, release)
                self._changed.notify_all()  # (an insert the limiter held may go now)
                if not parts:
                    return None, None
                sampled = parts[0] if len(parts) == 1 else _joined(parts)
                # (under the lock: an insert may not evict these items and reuse their rows first)
                return sampled, self._store.gather_rows(sampled.lanes, sampled.rows)
        finally:
            self._release(release)  # (a deleted item's rows are reused after the gather)

    def _await_mutations(self, deadline: float) -> bool:
        """(Gated, under the lock) waits for the priority updates a grant asked for; False when
        ``deadline`` came first. After ``MUTATION_WAIT_S`` without them it stops waiting."""
        if self.mutations >= self._mutations_wanted:
            self._mutations_waited_since = None
            return True
        if self._mutations_waited_since is None:
            self._mutations_waited_since = time.monotonic()
        give_up_at = self._mutations_waited_since + MUTATION_WAIT_S
        if self._wait(lambda: self.mutations >= self._mutations_wanted, min(deadline, give_up_at)):
            self._mutations_waited_since = None
            return True
        if time.monotonic() >= give_up_at:  # its agent writes no priorities: sample without them
            self._wait_for_mutations, self._mutations_wanted, self._mutations_waited_since = False, 0, None
            return True
        return False

    def grant(self, num_items: int, after_mutations: int = 0) -> None:
        """(Gated tables) lets ``num_items`` more items be sampled; from a prioritized table only
        once ``after_mutations`` priority updates reached it (the priorities of every earlier
        update). A table whose priorities are not updated within ``MUTATION_WAIT_S`` of a
        sample's wish stops waiting for them (its agent does not write any)."""
        with self._lock:
            self._granted += num_items
            if self.spec.sampler == "prioritized" and self._wait_for_mutations:
                self._mutations_wanted = max(self._mutations_wanted, after_mutations)
            self._changed.notify_all()

    def mutate(self, keys: Any, priorities: Any, deletes: Any = ()) -> None:
        """Sets the priorities of items ``keys`` (arrays, keys distinct) and deletes ``deletes``;
        keys no longer in the table are ignored."""
        keys, priorities = _keys(keys), np.asarray(priorities, np.float64).reshape(-1)
        keys, priorities = keys[keys > 0], priorities[keys > 0]  # (0: a key no table makes, or too big)
        deletes = _keys(deletes)
        release: list[tuple[int, Any]] = []
        try:
            with self._lock:
                if len(keys):
                    slots = self._slots_of(keys)
                    known = slots >= 0
                    slots, values = slots[known], priorities[known]
                    self._sampler.update_many(slots, values)
                    self._remover.update_many(slots, values)
                    self._priority[slots] = values
                if len(deletes):
                    for slot in self._slots_of(deletes).tolist():
                        if slot >= 0 and self._key[slot] != 0:
                            self._delete(slot, release)
                self.mutations += 1
                self._changed.notify_all()
        finally:
            self._release(release)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._changed.notify_all()

    # -- info and checkpoints --------------------------------------------------------------------
    def info(self) -> dict[str, Any]:
        with self._lock:
            limit = self.spec.rate_limit
            return {
                "name": self.spec.name,
                "current_size": self._size,
                "max_size": self.spec.max_size,
                "inserts": self.inserts,
                "samples": self.samples,
                "deletes": self.deletes,
                "samples_per_insert": limit.samples_per_insert,
                "min_size_to_sample": limit.min_size_to_sample,
                "min_diff": limit.min_diff,
                "max_diff": limit.max_diff,
            }

    def state(self) -> tuple[dict[str, Any], Saved]:
        """The counts and the items, oldest inserted first (under the lock: a consistent copy).
        The store holds the items' rows once more for the caller, who lets go of them
        (``release_saved``) when done: an item removed meanwhile must not take its steps with it."""
        with self._lock:
            counts = {
                "inserts": self.inserts,
                "samples": self.samples,
                "deletes": self.deletes,
                "rng": self._rng.bit_generator.state,
            }
            live = np.flatnonzero(self._key != 0)
            live = live[np.argsort(self._serial[live], kind="stable")]
            saved = Saved(
                self._key[live],
                self._priority[live],
                self._times[live],
                self._lane[live],
                self._length[live],
                self._rows[live],
            )
            self._store_refs(saved, +1)
            return counts, saved

    def release_saved(self, saved: Saved) -> None:
        """Lets go of the rows ``state`` held for a checkpoint."""
        self._store_refs(saved, -1)

    def _store_refs(self, saved: Saved, change: int) -> None:
        for i in range(len(saved)):
            lane, rows = saved.steps(i)
            if change > 0:
                self._store.hold_rows(lane, rows)
            else:
                self._store.release_rows(lane, rows)

    def restore(self, counts: dict[str, Any], items: list[tuple[int, Any, float, int]]) -> None:
        """Puts back a checkpoint's items ``(key, Rows held for it, priority, times sampled)``
        (in their insertion order, so FIFO/LIFO keep it) and counts. An item goes back to the
        slot its key names (the same slots, so the same sum tree and the same draws as before);
        a key that names no free slot here gets another, found through a dict."""
        with self._lock:
            mask = (1 << self._shift) - 1
            wanted = [key & mask for key, _, _, _ in items if key > 0 and key & mask < self._slot_limit]
            needed = min(self._slot_limit, max([len(items), *[slot + 1 for slot in wanted]]))
            capacity = len(self._key)
            while capacity < needed:
                capacity = min(self._slot_limit, 2 * capacity)
            if capacity > len(self._key):
                self._grow(capacity)
            free = set(self._free[: self._top].tolist())
            placed: list[tuple[int, int, Any, float, int]] = []
            for key, steps, priority, times in items:
                slot = key & mask
                if key > 0 and slot in free:
                    free.discard(slot)
                    placed.append((slot, key, steps, priority, times))
                else:
                    placed.append((-1, key, steps, priority, times))
            for n, (slot, key, steps, priority, times) in enumerate(placed):
                if slot < 0:  # (capacity >= len(items): a free slot is left for it)
                    slot = free.pop()
                    self._foreign[key] = slot
                self._put(slot, key, n + 1, steps.lane, steps.index, float(priority), int(times))
            remaining = sorted(free, reverse=True)
            self._free[: len(remaining)] = remaining
            self._top = len(remaining)
            self.inserts, self.samples, self.deletes = counts["inserts"], counts["samples"], counts["deletes"]
            self._rng.bit_generator.state = counts["rng"]


@dataclasses.dataclass
class _OneRow:
    """A one-step item's steps as ``insert_many`` takes them (``Rows``' ``lane`` and ``index``)."""

    lane: int
    index: int


def _keys(keys: Any) -> np.ndarray:
    """Keys as int64 (one beyond int64, which no table makes, as 0: no item)."""
    keys = np.asarray(keys).reshape(-1)
    if keys.dtype.kind in "iu" and (keys.dtype.kind == "i" or keys.dtype.itemsize < 8):
        return keys.astype(np.int64)
    return np.array([k if 0 < k < 1 << 63 else 0 for k in keys.tolist()], np.int64)


def _joined(parts: list[Sampled]) -> Sampled:
    """One ``Sampled`` of several, in order."""
    length = parts[0].rows.shape[1]
    if any(p.rows.shape[1] != length for p in parts):
        raise ValueError("items of one sample differ in length; a table's items must all have one length")
    return Sampled(*(np.concatenate([getattr(p, f.name) for p in parts]) for f in dataclasses.fields(Sampled)))


__all__ = ["ReplayClosed", "ReplayServerGone", "Sampled", "Saved", "Table"]
