"""Item selectors of the native replay backend: which item a table samples or removes next.

A table keeps its items' metadata in arrays indexed by *slot* (``shoal.replay.native.table``);
each selector holds the slots of the table's items, in arrays (no object per item), and answers
``select(rng) -> (slot, probability)``, and the samplers (uniform, prioritized)
``select_many(rng, count) -> (slots, probabilities)`` for a whole batch in array operations:
``count`` draws with replacement, the very draws (same slots, same generator state after) that
``count`` calls of ``select`` would make:

* ``UniformSelector``: every item with probability ``1 / size``;
* ``PrioritizedSelector(exponent)``: item ``i`` with probability ``p_i ** exponent / sum_j
  p_j ** exponent`` (a sum tree over the slots: ``O(log capacity)`` to select, insert, update or
  delete, and a batch of each level by level); when every weight is 0 it selects uniformly, as
  Reverb does;
* ``FifoSelector`` / ``LifoSelector``: the oldest / newest item, with probability 1.

Slots are small non-negative ints; the arrays grow (doubling) to hold the largest slot given.
Selectors are not thread-safe: the table calls them under its lock. ``rng`` is a
``numpy.random.Generator`` (the table's, seeded from the server's seed).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def _grown(array: np.ndarray, size: int, fill: int | float | bool = 0) -> np.ndarray:
    """``array`` extended (doubling) to at least ``size`` entries, new ones ``fill``."""
    if size <= len(array):
        return array
    new = max(size, 2 * len(array), 16)
    out = np.full(new, fill, array.dtype)
    out[: len(array)] = array
    return out


class UniformSelector:
    """Every item with probability ``1 / size``: the slots in a dense array (a deleted slot's
    place takes the last one), one draw of ``count`` positions per batch."""

    def __init__(self) -> None:
        self._keys = np.zeros(16, np.int64)  # the live slots, dense: [0, size)
        self._position = np.zeros(16, np.int64)  # slot -> its place in _keys
        self._size = 0

    def insert(self, slot: int, priority: float) -> None:
        if self._size == len(self._keys):
            self._keys = _grown(self._keys, self._size + 1)
        self._position = _grown(self._position, slot + 1)
        self._position[slot] = self._size
        self._keys[self._size] = slot
        self._size += 1

    def insert_many(self, slots: np.ndarray, priorities: np.ndarray) -> None:
        count = len(slots)
        if not count:
            return
        self._keys = _grown(self._keys, self._size + count)
        self._position = _grown(self._position, int(slots.max()) + 1)
        self._keys[self._size : self._size + count] = slots
        self._position[slots] = np.arange(self._size, self._size + count)
        self._size += count

    def update(self, slot: int, priority: float) -> None:
        pass

    def update_many(self, slots: Sequence[int] | np.ndarray, priorities: Sequence[float] | np.ndarray) -> None:
        pass

    def delete(self, slot: int) -> None:
        at = int(self._position[slot])
        self._size -= 1
        last = int(self._keys[self._size])
        if last != slot:  # (swap the last slot into the hole: O(1))
            self._keys[at] = last
            self._position[last] = at

    def delete_many(self, slots: np.ndarray) -> None:
        for slot in slots.tolist():
            self.delete(slot)

    def select(self, rng: np.random.Generator) -> tuple[int, float]:
        n = self._size
        return int(self._keys[int(rng.integers(n))]), 1.0 / n

    def select_many(self, rng: np.random.Generator, count: int) -> tuple[np.ndarray, np.ndarray]:
        n = self._size
        return self._keys[rng.integers(n, size=count)], np.full(count, 1.0 / n)


class _OrderedSelector:
    """The slots in insertion order, in a ring of positions ``[head, tail)`` (compacted when it
    fills): the oldest at ``head``, the newest at ``tail - 1``. A slot deleted from inside marks
    its position dead, and dead positions are dropped when they reach an end, so both ends are
    always live (no object per item)."""

    newest = False

    def __init__(self) -> None:
        self._keys = np.zeros(16, np.int64)  # position -> slot
        self._live = np.zeros(16, bool)  # position -> holds a live slot
        self._position = np.zeros(16, np.int64)  # slot -> its position
        self._head = self._tail = 0

    def _room(self, count: int) -> None:
        if self._tail + count <= len(self._keys):
            return
        live = np.flatnonzero(self._live[self._head : self._tail]) + self._head
        size = max(16, 2 * (len(live) + count))
        keys, alive = np.zeros(size, np.int64), np.zeros(size, bool)
        keys[: len(live)], alive[: len(live)] = self._keys[live], True
        self._position[keys[: len(live)]] = np.arange(len(live))
        self._keys, self._live, self._head, self._tail = keys, alive, 0, len(live)

    def insert(self, slot: int, priority: float) -> None:
        self._room(1)
        self._position = _grown(self._position, slot + 1)
        self._keys[self._tail], self._live[self._tail] = slot, True
        self._position[slot] = self._tail
        self._tail += 1

    def insert_many(self, slots: np.ndarray, priorities: np.ndarray) -> None:
        count = len(slots)
        if not count:
            return
        self._room(count)
        self._position = _grown(self._position, int(slots.max()) + 1)
        end = self._tail + count
        self._keys[self._tail : end], self._live[self._tail : end] = slots, True
        self._position[slots] = np.arange(self._tail, end)
        self._tail = end

    def update(self, slot: int, priority: float) -> None:
        pass

    def update_many(self, slots: Sequence[int] | np.ndarray, priorities: Sequence[float] | np.ndarray) -> None:
        pass

    def delete(self, slot: int) -> None:
        self._live[self._position[slot]] = False
        live = self._live
        while self._head < self._tail and not live[self._head]:
            self._head += 1
        while self._tail > self._head and not live[self._tail - 1]:
            self._tail -= 1

    def delete_many(self, slots: np.ndarray) -> None:
        """``delete`` of each of ``slots``, the ends moved past dead positions at once."""
        self._live[self._position[slots]] = False
        alive = np.flatnonzero(self._live[self._head : self._tail])
        if len(alive):
            self._head, self._tail = self._head + int(alive[0]), self._head + int(alive[-1]) + 1
        else:
            self._tail = self._head

    def oldest(self, count: int) -> np.ndarray:
        """The slots of the ``count`` oldest items (fewer if it holds fewer), oldest first."""
        alive = np.flatnonzero(self._live[self._head : self._tail])[:count]
        return self._keys[alive + self._head]

    def select(self, rng: np.random.Generator) -> tuple[int, float]:
        return int(self._keys[self._tail - 1 if self.newest else self._head]), 1.0


class FifoSelector(_OrderedSelector):
    """The oldest item first."""


class LifoSelector(_OrderedSelector):
    """The newest item first."""

    newest = True


class PrioritizedSelector:
    """``P(i) = p_i ** exponent / sum_j p_j ** exponent`` by a sum tree of the weights.

    The tree is an array of ``2 * capacity`` sums: leaf ``capacity + slot`` holds the weight of
    the item in ``slot``, node ``n`` the sum of nodes ``2n`` and ``2n + 1``, node 1 the total.
    Capacity doubles to hold the largest slot given."""

    def __init__(self, exponent: float) -> None:
        if not exponent >= 0:
            raise ValueError(f"priority exponent ({exponent}) must be >= 0")
        self.exponent = float(exponent)
        self._capacity = 1
        self._tree = np.zeros(2, np.float64)
        self._live = np.zeros(1, bool)  # slot -> holds an item

    def _weight(self, priority: float) -> float:
        if not priority >= 0:  # (NaN too)
            raise ValueError(f"a priority must be a number >= 0, got {priority}")
        return 1.0 if self.exponent == 0 else float(priority) ** self.exponent

    def _weights(self, priorities: Sequence[float] | np.ndarray) -> np.ndarray:
        priorities = np.asarray(priorities, np.float64)
        if not (priorities >= 0).all():  # (NaN too)
            bad = priorities[~(priorities >= 0)][0]
            raise ValueError(f"a priority must be a number >= 0, got {bad}")
        if self.exponent == 0:
            return np.ones_like(priorities)
        exponent = self.exponent  # (Python's power, as ``_weight``: numpy's may differ in the last bit)
        return np.array([p**exponent for p in priorities.tolist()], np.float64)

    def _set(self, slot: int, weight: float) -> None:
        node = self._capacity + slot
        self._tree[node] = weight
        node //= 2
        while node:
            self._tree[node] = self._tree[2 * node] + self._tree[2 * node + 1]
            node //= 2

    def _set_many(self, slots: np.ndarray, weights: np.ndarray) -> None:
        """Leaves ``slots`` (distinct) get ``weights``, the sums redone level by level for the
        changed leaves only (the same tree as one ``_set`` at a time)."""
        tree = self._tree
        nodes = slots + self._capacity
        tree[nodes] = weights
        nodes //= 2
        while nodes[0] > 0:  # (every leaf is at one depth; a parent named twice gets one sum twice)
            left = 2 * nodes
            tree[nodes] = tree[left] + tree[left + 1]
            nodes //= 2

    def _fit(self, slot: int) -> None:
        """Grows the tree (doubling) until it has a leaf for ``slot``."""
        if slot < self._capacity:
            return
        old, capacity = self._capacity, self._capacity
        while capacity <= slot:
            capacity *= 2
        tree = np.zeros(2 * capacity, np.float64)
        tree[capacity : capacity + old] = self._tree[old : 2 * old]
        start = capacity
        while start > 1:  # (level by level, each parent the sum of its two children)
            start //= 2
            tree[start : 2 * start] = tree[2 * start : 4 * start : 2] + tree[2 * start + 1 : 4 * start : 2]
        self._capacity, self._tree = capacity, tree
        self._live = _grown(self._live, capacity, False)

    def insert(self, slot: int, priority: float) -> None:
        weight = self._weight(priority)
        self._fit(slot)
        self._live[slot] = True
        self._set(slot, weight)

    def insert_many(self, slots: np.ndarray, priorities: np.ndarray) -> None:
        if not len(slots):
            return
        weights = self._weights(priorities)
        self._fit(int(slots.max()))
        self._live[slots] = True
        self._set_many(np.asarray(slots, np.int64), weights)

    def update(self, slot: int, priority: float) -> None:
        self._set(slot, self._weight(priority))

    def update_many(self, slots: Sequence[int] | np.ndarray, priorities: Sequence[float] | np.ndarray) -> None:
        """``update`` of each ``(slot, priority)`` (slots distinct), as one level-by-level pass."""
        if not len(slots):
            return
        self._set_many(np.array(slots, np.int64), self._weights(priorities))

    def delete(self, slot: int) -> None:
        self._live[slot] = False
        self._set(slot, 0.0)

    def delete_many(self, slots: np.ndarray) -> None:
        self._live[slots] = False
        self._set_many(np.asarray(slots, np.int64), np.zeros(len(slots)))

    def _live_slots(self) -> np.ndarray:
        return np.flatnonzero(self._live)

    def select(self, rng: np.random.Generator) -> tuple[int, float]:
        total = self._tree[1]
        if not total > 0:  # every weight is 0: uniform over the items
            slots = self._live_slots()
            return int(slots[int(rng.integers(len(slots)))]), 1.0 / len(slots)
        target, node = rng.random() * total, 1
        while node < self._capacity:
            left = self._tree[2 * node]
            if target < left or self._tree[2 * node + 1] <= 0:
                node = 2 * node
            else:
                target -= left
                node = 2 * node + 1
        slot = node - self._capacity
        if not self._live[slot]:  # (rounding put the target on an empty leaf: the heaviest item)
            slot = self._heaviest()
        return slot, float(self._tree[self._capacity + slot] / total)

    def _heaviest(self) -> int:
        slots = self._live_slots()
        return int(slots[np.argmax(self._tree[self._capacity + slots])])

    def select_many(self, rng: np.random.Generator, count: int) -> tuple[np.ndarray, np.ndarray]:
        """``count`` draws at once: ``count`` uniform targets descended level by level together."""
        tree, total = self._tree, self._tree[1]
        if not total > 0:  # every weight is 0: uniform over the items
            slots = self._live_slots()
            return slots[rng.integers(len(slots), size=count)], np.full(count, 1.0 / len(slots))
        target = rng.random(count) * total
        node = np.ones(count, np.int64)
        while node[0] < self._capacity:  # (every leaf is at one depth)
            node *= 2
            left = tree[node]
            go_right = (target >= left) & (tree[node + 1] > 0)
            target -= left * go_right  # (exactly ``target - left`` where it goes right)
            node += go_right
        slots = node - self._capacity
        empty = ~self._live[slots]
        if empty.any():  # (rounding put a target on an empty leaf: the heaviest item)
            slots[empty] = self._heaviest()
        return slots, tree[self._capacity + slots] / total


def make_selector(kind: str, exponent: float | None = None) -> Any:
    """The selector named ``kind`` (``shoal.replay.tables.SELECTORS``); ``Any``: the selectors share no
    base class (only uniform and prioritized ones have ``select_many``, which ``table`` calls on those)."""
    if kind == "prioritized":
        if exponent is None:
            raise ValueError("a prioritized selector needs a priority exponent")
        return PrioritizedSelector(exponent)
    return {"uniform": UniformSelector, "fifo": FifoSelector, "lifo": LifoSelector}[kind]()
