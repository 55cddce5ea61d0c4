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

A full table's run of one-step inserts (``Table.insert_rows``) replaces items: each new item
removes the remover's choice and takes its slot. Every selector has ``replace_many(slots,
priorities)`` (its state as ``delete(slots[i]); insert(slots[i], priorities[i])`` one after
another would leave it; ``distinct`` when no slot repeats) and, as a remover, ``remove_insert_many(rng, priorities) -> slots``
(the items such a run removes, one per new item, with the very draws one at a time would make,
and its state as they leave it): FIFO the oldest, LIFO the newest again and again (each new
item is the newest), uniform ``count`` positions drawn at once and followed through the dense
array's swaps in array operations (``_follow``), prioritized one descent per new item (each draw
is made on the tree the item before changed: the one choice a run cannot make at once).

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


def previous_of(values: np.ndarray) -> np.ndarray:
    """Per entry, the index of the last earlier entry of the same value (-1 if none)."""
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    same = ordered[1:] == ordered[:-1]
    out = np.full(len(values), -1, np.int64)
    out[order[1:][same]] = order[:-1][same]
    return out


def last_of_each(values: np.ndarray) -> np.ndarray:
    """A mask of the entries no later entry repeats (each value's last occurrence)."""
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    last = np.ones(len(values), bool)
    last[:-1] = ordered[1:] != ordered[:-1]
    out = np.zeros(len(values), bool)
    out[order[last]] = True
    return out


def _roots(parent: np.ndarray) -> np.ndarray:
    """Each entry's root in a forest of pointers to earlier entries (a root points to itself),
    by pointer doubling: ``O(log depth)`` array operations."""
    while True:
        up = parent[parent]
        if (up == parent).all():
            return parent
        parent = up


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
        if slot >= len(self._position):
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

    # -- a full table's run of replacements: delete(slot) then insert(slot) per new item. In the
    # dense array that is a swap of the slot's place with the last place (``n - 1``).
    def _follow(self, places: np.ndarray) -> np.ndarray:
        """Replacements of the items at ``places`` (each drawn from ``[0, n)`` on the array as
        the ones before left it) in one go: the slots removed, in order, and the array as the
        swaps one at a time leave it. Step ``i`` reads ``x_i`` at ``places[i]``, writes there
        the last place's value ``x_{i-1}`` (``x_0``: the last slot now) and puts ``x_i`` last;
        so ``x_i`` is ``x_{i-1}`` when it read the last place, ``x_{j-1}`` when step ``j`` last
        wrote its place, else the slot there now: pointers resolved at once (``_roots``)."""
        keys, count, last = self._keys, len(places), self._size - 1
        parent = np.arange(count + 1)
        value = np.empty(count + 1, np.int64)
        value[0], value[1:] = keys[last], keys[places]
        steps = np.arange(1, count + 1)
        earlier = previous_of(places)  # (a step index, 0-based, of the same place)
        at_last = places == last
        parent[1:] = np.where(at_last, steps - 1, np.where(earlier >= 0, earlier, steps))
        x = value[_roots(parent)]
        final = last_of_each(places) & ~at_last  # (each place's last write; the last place's is x_k)
        written = places[final]
        keys[written] = x[steps[final] - 1]
        keys[last] = x[count]
        self._position[keys[written]] = written
        self._position[keys[last]] = last
        return x[1:]

    def _places_of(self, slots: np.ndarray) -> np.ndarray:
        """The places at which replacements of ``slots`` (in order) find them: the last place
        when it is the slot the step before put there; the place step ``j + 1`` moved it to
        when step ``j`` put it last before; else its place now (pointers resolved at once)."""
        count, last = len(slots), self._size - 1
        chain = np.empty(count + 1, np.int64)
        chain[0], chain[1:] = self._keys[last], slots
        earlier = previous_of(chain)[1:]  # (for steps 1..count: the last earlier index of the slot)
        steps = np.arange(1, count + 1)
        at_last = earlier == steps - 1
        parent = np.arange(count + 1)
        parent[1:] = np.where(at_last | (earlier < 0), steps, earlier + 1)
        value = np.empty(count + 1, np.int64)
        value[0] = last
        value[1:] = np.where(at_last, last, self._position[slots])
        return value[_roots(parent)][1:]

    def replace_many(self, slots: np.ndarray, priorities: np.ndarray, distinct: bool = False) -> None:
        if not len(slots):
            return
        last = self._size - 1
        carry = self._keys[last]
        if not (distinct and (slots != carry).all()):
            self._follow(self._places_of(slots))
            return
        # (distinct slots, none of them last: step i swaps slot i's place, where it has been all
        # along, with the last place, which holds slot i - 1 (the last slot now for i = 0))
        places = self._position[slots]
        self._keys[places] = np.concatenate([[carry], slots[:-1]])
        self._keys[last] = slots[-1]
        self._position[self._keys[places]] = places
        self._position[slots[-1]] = last

    def remove_insert_many(self, rng: np.random.Generator, priorities: np.ndarray) -> np.ndarray:
        return self._follow(rng.integers(self._size, size=len(priorities)))


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
        if self._tail == len(self._keys):
            self._room(1)
        if slot >= len(self._position):
            self._position = _grown(self._position, slot + 1)
        tail = self._tail
        self._keys[tail], self._live[tail] = slot, True
        self._position[slot] = tail
        self._tail = tail + 1

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
        live, head, tail = self._live, self._head, self._tail
        live[self._position[slot]] = False
        while head < tail and not live[head]:
            head += 1
        while tail > head and not live[tail - 1]:
            tail -= 1
        self._head, self._tail = head, tail

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

    def replace_many(self, slots: np.ndarray, priorities: np.ndarray, distinct: bool = False) -> None:
        """Each slot's old place dies; each slot goes last as its last replacement put it
        (``distinct``: the caller knows no slot repeats)."""
        if distinct:
            self.delete_many(slots)
            self.insert_many(slots, priorities)
        elif len(slots):
            self.delete_many(np.unique(slots))
            last = last_of_each(slots)
            self.insert_many(slots[last], priorities[last])

    def remove_insert_many(self, rng: np.random.Generator, priorities: np.ndarray) -> np.ndarray:
        """FIFO: the ``count`` oldest (a new item is newer than all of them); LIFO: the newest,
        then each new item in turn (the newest when the next comes), all in its slot."""
        count = len(priorities)
        if self.newest:
            slots = np.full(count, self._keys[self._tail - 1], np.int64)
            self.replace_many(slots[-1:], priorities[-1:], True)
        else:
            slots = self.oldest(count)
            self.replace_many(slots, priorities, True)
        return slots


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

    def replace_many(self, slots: np.ndarray, priorities: np.ndarray, distinct: bool = False) -> None:
        """Each slot's leaf gets its last replacement's weight (the tree is a function of its
        leaves: the same sums as one replacement at a time)."""
        if distinct:
            self._set_many(np.asarray(slots, np.int64), self._weights(priorities))
        elif len(slots):
            last = last_of_each(slots)
            self._set_many(np.asarray(slots[last], np.int64), self._weights(np.asarray(priorities)[last]))

    def remove_insert_many(self, rng: np.random.Generator, priorities: np.ndarray) -> np.ndarray:
        """One ``select`` per new item, its weight set in the slot chosen before the next draw
        (each draw depends on the tree the one before changed, as one at a time)."""
        weights = self._weights(priorities).tolist()
        slots = np.empty(len(weights), np.int64)
        for i, weight in enumerate(weights):
            slot = self.select(rng)[0]
            self._set(slot, weight)
            slots[i] = slot
        return slots


def make_selector(kind: str, exponent: float | None = None) -> Any:
    """The selector named ``kind`` (``shoal.replay.tables.SELECTORS``); ``Any``: the selectors share no
    base class (only uniform and prioritized ones have ``select_many``, which ``table`` calls on
    those; every one has ``replace_many`` and ``remove_insert_many``)."""
    if kind == "prioritized":
        if exponent is None:
            raise ValueError("a prioritized selector needs a priority exponent")
        return PrioritizedSelector(exponent)
    return {"uniform": UniformSelector, "fifo": FifoSelector, "lifo": LifoSelector}[kind]()
