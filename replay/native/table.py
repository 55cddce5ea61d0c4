"""A native replay table: items, their selectors, and Reverb's rate limiter.

An item is a reference to ``length`` steps of the server's step store (``ColumnStore``: rows of
its columns) plus its
priority and how often it was sampled; items that overlap share their steps (no copies). The
table has Reverb's semantics (``reverb/cc/table.cc``, ``rate_limiter.cc``) as Shoal uses them:

* **Insert.** When the table holds ``max_size`` items, the remover's choice is deleted first.
  The rate limiter lets an insert through when ``size + 1 <= min_size_to_sample`` (until the
  table can be sampled, inserts are free) or when ``(inserts + 1) * samples_per_insert -
  samples <= max_diff``; otherwise the insert waits, at most its timeout.
* **Sample.** One item at a time, each when ``size >= min_size_to_sample`` and ``inserts *
  samples_per_insert - samples - 1 >= min_diff``; otherwise it waits, at most its timeout. The
  sampler picks the item, with its probability (``selectors``); an item sampled
  ``max_times_sampled`` times (if > 0) is deleted.
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
import threading
import time
from typing import Any

import numpy as np

from shoal.replay.native.selectors import make_selector
from shoal.replay.tables import TableSpec


MUTATION_WAIT_S = 60.0


class ReplayClosed(RuntimeError):
    """The replay server stopped while a call waited on one of its tables."""


class ReplayServerGone(ConnectionError):
    """The replay server stopped answering (it stopped, crashed, or the network went away)."""


@dataclasses.dataclass(slots=True)
class Item:
    steps: Any  # its rows in the store (``ColumnStore.hold``), oldest first
    priority: float
    times_sampled: int = 0


class Table:
    """One table of a ``NativeReplayServer`` (see the module docstring)."""

    def __init__(self, spec: TableSpec, store: Any, rng: np.random.Generator, gated: bool = False) -> None:
        self.spec, self._store, self._rng = spec, store, rng
        self._sampler = make_selector(spec.sampler, spec.priority_exponent)
        self._remover = make_selector(spec.remover, spec.priority_exponent)
        self.items: dict[int, Item] = {}
        self.inserts = self.samples = self.deletes = 0
        self.mutations = 0  # calls of mutate (priority updates)
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._closed = False
        self.gated = gated
        self._granted = 0  # (gated) items the sampler may take now
        self._mutations_wanted = 0  # (gated) priority updates to wait for before those samples
        self._wait_for_mutations = True
        self._mutations_waited_since: float | None = None

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

    def can_sample(self, num_items: int) -> bool:
        with self._lock:
            return self._can_sample(num_items)

    def _wait(self, ready, deadline: float) -> bool:
        """Waits until ``ready()`` (under the lock) or the deadline; False when it passed."""
        while not ready():
            if self._closed:
                raise ReplayClosed(f"replay table '{self.spec.name}' was closed")
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self._changed.notify_all()  # (what this call changed so far may release another)
            self._changed.wait(left)
        if self._closed:
            raise ReplayClosed(f"replay table '{self.spec.name}' was closed")
        return True

    # -- insert / sample / mutate ----------------------------------------------------------------
    def insert(self, key: int, steps: Any, priority: float, deadline: float) -> bool:
        """Inserts the item (its steps already referenced in the store for it); False when the
        rate limiter held it back until ``deadline`` (nothing was inserted)."""
        return self.insert_many([(key, steps, priority)], deadline) == 1

    def insert_many(self, items: list[tuple[int, Any, float]], deadline: float) -> int:
        """Inserts ``(key, steps, priority)`` items in order (their steps already referenced in
        the store for them), each as the rate limiter lets it through before ``deadline``, under
        one hold of the lock; returns how many went in (the rest were held back)."""
        with self._lock:
            for done, (key, steps, priority) in enumerate(items):
                if not self._wait(self._can_insert, deadline):
                    self._changed.notify_all()
                    return done
                if len(self.items) >= self.spec.max_size:
                    self._delete(self._remover.select(self._rng)[0])
                self.items[key] = Item(steps, float(priority))
                self._sampler.insert(key, priority)
                self._remover.insert(key, priority)
                self.inserts += 1
            self._changed.notify_all()
            return len(items)

    def _delete(self, key: int, release: list | None = None) -> None:
        """Removes item ``key``; its steps are let go of now, or appended to ``release``."""
        item = self.items.pop(key)
        self._sampler.delete(key)
        self._remover.delete(key)
        self.deletes += 1
        if release is None:
            self._store.release(item.steps)
        else:
            release.append(item.steps)

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

    def sample(self, num_items: int, deadline: float) -> tuple[list[tuple[int, float, int, float, int]], list | None]:
        """Up to ``num_items`` items, each taken when the limiter allows it: ``(key, priority,
        times_sampled, probability, table_size)`` per item (as sampled) and the items' columns
        (``ColumnStore.gather``; ``None`` when no item came). Fewer when ``deadline`` passed
        first. Items the limiter lets through at once are drawn as one batch (``select_many``:
        the same draws as one at a time); the rest one by one as the limiter admits them."""
        meta: list[tuple[int, float, int, float, int]] = []
        steps: list = []
        release: list = []
        batched = self.spec.sampler in ("uniform", "prioritized") and not self.spec.max_times_sampled
        with self._lock:
            try:
                while len(meta) < num_items:
                    ready = self._ready_now(num_items - len(meta)) if batched else 0
                    if ready > 1:
                        keys, probabilities = self._sampler.select_many(self._rng, ready)
                        size = len(self.items)
                        for key, probability in zip(keys.tolist(), probabilities.tolist()):
                            item = self.items[key]
                            item.times_sampled += 1
                            meta.append((key, item.priority, item.times_sampled, probability, size))
                            steps.append(item.steps)
                        self.samples += ready
                        if self.gated:
                            self._granted -= ready
                        continue
                    if self.gated:
                        if not self._wait(lambda: self._can_sample() and self._granted > 0, deadline):
                            break
                        if not self._await_mutations(deadline):
                            break
                    elif not self._wait(self._can_sample, deadline):
                        break
                    key, probability = self._sampler.select(self._rng)
                    item = self.items[key]
                    item.times_sampled += 1
                    meta.append((key, item.priority, item.times_sampled, probability, len(self.items)))
                    steps.append(item.steps)
                    self.samples += 1
                    if self.gated:
                        self._granted -= 1
                    if self.spec.max_times_sampled and item.times_sampled >= self.spec.max_times_sampled:
                        self._delete(key, release)
                columns = self._store.gather(steps) if steps else None
            finally:
                for rows in release:  # (after the gather: a deleted item's rows are reused after it)
                    self._store.release(rows)
            self._changed.notify_all()  # (an insert the limiter held may go now)
        return meta, columns

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

    def mutate(self, updates: dict[int, float], deletes: list[int]) -> None:
        with self._lock:
            keys, priorities = [], []
            for key, priority in updates.items():
                item = self.items.get(key)
                if item is not None:
                    item.priority = float(priority)
                    keys.append(key)
                    priorities.append(priority)
            self._sampler.update_many(keys, priorities)
            self._remover.update_many(keys, priorities)
            for key in deletes:
                if key in self.items:
                    self._delete(key)
            self.mutations += 1
            self._changed.notify_all()

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
                "current_size": len(self.items),
                "max_size": self.spec.max_size,
                "inserts": self.inserts,
                "samples": self.samples,
                "deletes": self.deletes,
                "samples_per_insert": limit.samples_per_insert,
                "min_size_to_sample": limit.min_size_to_sample,
                "min_diff": limit.min_diff,
                "max_diff": limit.max_diff,
            }

    def state(self) -> tuple[dict[str, Any], list[tuple[int, Item]]]:
        """The counts and the items, oldest inserted first (under the lock: a consistent copy).
        The store holds the items' steps once more for the caller, who releases them (``Item.steps``
        of each) when done: an item removed meanwhile must not take its steps with it."""
        with self._lock:
            counts = {
                "inserts": self.inserts,
                "samples": self.samples,
                "deletes": self.deletes,
                "rng": self._rng.bit_generator.state,
            }
            items = [(key, dataclasses.replace(item)) for key, item in self.items.items()]
            for _, item in items:
                self._store.hold(item.steps)
            return counts, items

    def restore(self, counts: dict[str, Any], items: list[tuple[int, Item]]) -> None:
        """Puts back a checkpoint's items (in their insertion order, so FIFO/LIFO keep it) and
        counts; the items' steps are already in the store."""
        with self._lock:
            for key, item in items:
                self.items[key] = item
                self._sampler.insert(key, item.priority)
                self._remover.insert(key, item.priority)
            self.inserts, self.samples, self.deletes = counts["inserts"], counts["samples"], counts["deletes"]
            self._rng.bit_generator.state = counts["rng"]
