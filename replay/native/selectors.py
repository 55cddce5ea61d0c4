"""Item selectors of the native replay backend: which item a table samples or removes next.

Each selector holds the keys of a table's items and answers ``select(rng) -> (key, probability)``,
and the samplers (uniform, prioritized) ``select_many(rng, count) -> (keys, probabilities)`` for a
whole batch in array operations: ``count`` draws with replacement, the very draws (same keys,
same generator state after) that ``count`` calls of ``select`` would make:

* ``UniformSelector``: every item with probability ``1 / size``;
* ``PrioritizedSelector(exponent)``: item ``i`` with probability ``p_i ** exponent / sum_j
  p_j ** exponent`` (a sum tree: ``O(log size)`` to select, insert, update or delete); when every
  weight is 0 it selects uniformly, as Reverb does;
* ``FifoSelector`` / ``LifoSelector``: the oldest / newest item, with probability 1.

Keys are the table's item keys (ints). Selectors are not thread-safe: the table calls them under
its lock. ``rng`` is a ``numpy.random.Generator`` (the table's, seeded from the server's seed).
"""

from __future__ import annotations

import numpy as np


class UniformSelector:
    """Every item with probability ``1 / size``: the keys in an array (a deleted key's place
    takes the last key), one draw of ``count`` positions per batch."""

    def __init__(self) -> None:
        self._keys = np.zeros(16, np.int64)
        self._size = 0
        self._index: dict[int, int] = {}

    def insert(self, key: int, priority: float) -> None:
        if self._size == len(self._keys):
            self._keys = np.concatenate([self._keys, np.zeros(len(self._keys), np.int64)])
        self._index[key] = self._size
        self._keys[self._size] = key
        self._size += 1

    def update(self, key: int, priority: float) -> None:
        pass

    def update_many(self, keys: list[int], priorities: list[float]) -> None:
        pass

    def delete(self, key: int) -> None:
        at = self._index.pop(key)
        self._size -= 1
        last = int(self._keys[self._size])
        if last != key:  # (swap the last key into the hole: O(1))
            self._keys[at] = last
            self._index[last] = at

    def select(self, rng: np.random.Generator) -> tuple[int, float]:
        n = self._size
        return int(self._keys[int(rng.integers(n))]), 1.0 / n

    def select_many(self, rng: np.random.Generator, count: int) -> tuple[np.ndarray, np.ndarray]:
        n = self._size
        return self._keys[rng.integers(n, size=count)], np.full(count, 1.0 / n)


class _OrderedSelector:
    """The keys in insertion order, in an array (positions ``[head, tail)`` of a ring that is
    compacted when it fills): the oldest at ``head``, the newest at ``tail - 1``. A key deleted
    from inside is marked gone and dropped when it reaches an end, so both ends are always live
    keys (8 bytes a key, no object per key)."""

    newest = False

    def __init__(self) -> None:
        self._keys = np.zeros(16, np.int64)
        self._head = self._tail = 0
        self._gone: set[int] = set()

    def insert(self, key: int, priority: float) -> None:
        if self._tail == len(self._keys):
            live = self._keys[self._head : self._tail]
            keys = np.zeros(max(16, 2 * len(live)), np.int64)
            keys[: len(live)] = live
            self._keys, self._head, self._tail = keys, 0, len(live)
        self._keys[self._tail] = key
        self._tail += 1

    def update(self, key: int, priority: float) -> None:
        pass

    def update_many(self, keys: list[int], priorities: list[float]) -> None:
        pass

    def delete(self, key: int) -> None:
        if self._keys[self._head] == key:
            self._head += 1
        elif self._keys[self._tail - 1] == key:
            self._tail -= 1
        else:
            self._gone.add(key)
        keys, gone = self._keys, self._gone
        while gone and self._head < self._tail and int(keys[self._head]) in gone:
            gone.discard(int(keys[self._head]))
            self._head += 1
        while gone and self._tail > self._head and int(keys[self._tail - 1]) in gone:
            gone.discard(int(keys[self._tail - 1]))
            self._tail -= 1

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
    Capacity doubles when the slots run out; freed slots are reused."""

    def __init__(self, exponent: float) -> None:
        if not exponent >= 0:
            raise ValueError(f"priority exponent ({exponent}) must be >= 0")
        self.exponent = float(exponent)
        self._capacity = 1
        self._tree = np.zeros(2, np.float64)
        self._slot: dict[int, int] = {}
        self._key_at = np.full(1, -1, np.int64)  # slot -> key (-1: free)
        self._free: list[int] = [0]

    def _weight(self, priority: float) -> float:
        if not priority >= 0:  # (NaN too)
            raise ValueError(f"a priority must be a number >= 0, got {priority}")
        return 1.0 if self.exponent == 0 else float(priority) ** self.exponent

    def _set(self, slot: int, weight: float) -> None:
        node = self._capacity + slot
        self._tree[node] = weight
        node //= 2
        while node:
            self._tree[node] = self._tree[2 * node] + self._tree[2 * node + 1]
            node //= 2

    def _grow(self) -> None:
        old, capacity = self._capacity, self._capacity * 2
        tree = np.zeros(2 * capacity, np.float64)
        tree[capacity : capacity + old] = self._tree[old : 2 * old]
        for node in range(capacity - 1, 0, -1):
            tree[node] = tree[2 * node] + tree[2 * node + 1]
        self._capacity, self._tree = capacity, tree
        self._key_at = np.concatenate([self._key_at, np.full(old, -1, np.int64)])
        self._free.extend(range(capacity - 1, old - 1, -1))

    def insert(self, key: int, priority: float) -> None:
        weight = self._weight(priority)
        if not self._free:
            self._grow()
        slot = self._free.pop()
        self._slot[key], self._key_at[slot] = slot, key
        self._set(slot, weight)

    def update(self, key: int, priority: float) -> None:
        self._set(self._slot[key], self._weight(priority))

    def update_many(self, keys: list[int], priorities: list[float]) -> None:
        """``update`` of each ``(key, priority)`` (keys distinct), the sums redone level by level
        for the changed leaves only (the same tree as one ``update`` at a time)."""
        if not keys:
            return
        weights = [self._weight(p) for p in priorities]
        tree = self._tree
        nodes = np.array([self._slot[k] for k in keys], np.int64) + self._capacity
        tree[nodes] = weights
        nodes //= 2
        while nodes[0] > 0:  # (every leaf is at one depth; a parent named twice gets one sum twice)
            left = 2 * nodes
            tree[nodes] = tree[left] + tree[left + 1]
            nodes //= 2

    def delete(self, key: int) -> None:
        slot = self._slot.pop(key)
        self._key_at[slot] = -1
        self._free.append(slot)
        self._set(slot, 0.0)

    def select(self, rng: np.random.Generator) -> tuple[int, float]:
        total = self._tree[1]
        if not total > 0:  # every weight is 0: uniform over the items
            keys = list(self._slot)
            return keys[int(rng.integers(len(keys)))], 1.0 / len(keys)
        target, node = rng.random() * total, 1
        while node < self._capacity:
            left = self._tree[2 * node]
            if target < left or self._tree[2 * node + 1] <= 0:
                node = 2 * node
            else:
                target -= left
                node = 2 * node + 1
        key = int(self._key_at[node - self._capacity])
        if key < 0:  # (rounding put the target on an empty leaf: take the heaviest item's path)
            key = self._heaviest()
        return key, float(self._tree[self._capacity + self._slot[key]] / total)

    def _heaviest(self) -> int:
        return max(self._slot, key=lambda k: self._tree[self._capacity + self._slot[k]])

    def select_many(self, rng: np.random.Generator, count: int) -> tuple[np.ndarray, np.ndarray]:
        """``count`` draws at once: ``count`` uniform targets descended level by level together."""
        tree, total = self._tree, self._tree[1]
        if not total > 0:  # every weight is 0: uniform over the items
            keys = np.fromiter(self._slot, np.int64, len(self._slot))
            return keys[rng.integers(len(keys), size=count)], np.full(count, 1.0 / len(keys))
        target = rng.random(count) * total
        node = np.ones(count, np.int64)
        while node[0] < self._capacity:  # (every leaf is at one depth)
            node *= 2
            left = tree[node]
            go_right = (target >= left) & (tree[node + 1] > 0)
            target -= left * go_right  # (exactly ``target - left`` where it goes right)
            node += go_right
        keys = self._key_at[node - self._capacity]
        empty = keys < 0
        if empty.any():  # (rounding put a target on an empty leaf: the heaviest item's path)
            keys[empty] = self._heaviest()
        slots = np.array([self._slot[k] for k in keys.tolist()], np.int64)
        return keys, tree[self._capacity + slots] / total


def make_selector(kind: str, exponent: float | None = None):
    """The selector named ``kind`` (``shoal.replay.tables.SELECTORS``)."""
    if kind == "prioritized":
        if exponent is None:
            raise ValueError("a prioritized selector needs a priority exponent")
        return PrioritizedSelector(exponent)
    return {"uniform": UniformSelector, "fifo": FifoSelector, "lifo": LifoSelector}[kind]()
