"""Item selectors of the native replay backend: which item a table samples or removes next.

Each selector holds the keys of a table's items and answers ``select(rng) -> (key, probability)``:

* ``UniformSelector``: every item with probability ``1 / size``;
* ``PrioritizedSelector(exponent)``: item ``i`` with probability ``p_i ** exponent / sum_j
  p_j ** exponent`` (a sum tree: ``O(log size)`` to select, insert, update or delete); when every
  weight is 0 it selects uniformly, as Reverb does;
* ``FifoSelector`` / ``LifoSelector``: the oldest / newest item, with probability 1.

Keys are the table's item keys (ints). Selectors are not thread-safe: the table calls them under
its lock. ``rng`` is a ``numpy.random.Generator`` (the table's, seeded from the server's seed).
"""

from __future__ import annotations

import collections

import numpy as np


class UniformSelector:
    def __init__(self) -> None:
        self._keys: list[int] = []
        self._index: dict[int, int] = {}

    def insert(self, key: int, priority: float) -> None:
        self._index[key] = len(self._keys)
        self._keys.append(key)

    def update(self, key: int, priority: float) -> None:
        pass

    def delete(self, key: int) -> None:
        at = self._index.pop(key)
        last = self._keys.pop()
        if last != key:  # (swap the last key into the hole: O(1))
            self._keys[at] = last
            self._index[last] = at

    def select(self, rng: np.random.Generator) -> tuple[int, float]:
        n = len(self._keys)
        return self._keys[int(rng.integers(n))], 1.0 / n


class _OrderedSelector:
    newest = False

    def __init__(self) -> None:
        self._keys: collections.OrderedDict[int, None] = collections.OrderedDict()

    def insert(self, key: int, priority: float) -> None:
        self._keys[key] = None

    def update(self, key: int, priority: float) -> None:
        pass

    def delete(self, key: int) -> None:
        del self._keys[key]

    def select(self, rng: np.random.Generator) -> tuple[int, float]:
        return next(reversed(self._keys) if self.newest else iter(self._keys)), 1.0


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
        self._key_at: list[int | None] = [None]
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
        self._key_at.extend([None] * old)
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

    def delete(self, key: int) -> None:
        slot = self._slot.pop(key)
        self._key_at[slot] = None
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
        key = self._key_at[node - self._capacity]
        if key is None:  # (rounding put the target on an empty leaf: take the heaviest item's path)
            key = max(self._slot, key=lambda k: self._tree[self._capacity + self._slot[k]])
        return key, float(self._tree[self._capacity + self._slot[key]] / total)


def make_selector(kind: str, exponent: float | None = None):
    """The selector named ``kind`` (``shoal.replay.tables.SELECTORS``)."""
    if kind == "prioritized":
        if exponent is None:
            raise ValueError("a prioritized selector needs a priority exponent")
        return PrioritizedSelector(exponent)
    return {"uniform": UniformSelector, "fifo": FifoSelector, "lifo": LifoSelector}[kind]()
