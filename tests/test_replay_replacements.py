"""A full native table's run of one-step inserts (``Table.insert_rows``: ``insert_items``) removes
the items that one-at-a-time inserts would remove, for every remover: the same items, keys,
priorities, times sampled, counts, and the same draws after (the selectors' state and the
generator's). Each check is also run against a deliberately broken removal choice (a plausible
shortcut) and must see the difference."""

from __future__ import annotations

import contextlib
import time

import numpy as np
import pytest

from shoal.core.specs import ArraySpec
from shoal.replay.native import NativeReplayServer
from shoal.replay.native import selectors as sel
from shoal.replay.native.columns import Rows
from shoal.replay.tables import RateLimit, TableSpec

SIGNATURE = {"a": ArraySpec((3,), np.float32), "b": ArraySpec((), np.int32)}
REMOVERS = ["fifo", "lifo", "uniform", "prioritized"]
MAX_SIZE = 6


def _server(sampler: str, remover: str) -> NativeReplayServer:
    spec = TableSpec(
        "t",
        sampler,
        remover,
        MAX_SIZE,
        RateLimit(1.0, 1, -1e300, 1e300),
        priority_exponent=0.7,
        signature=SIGNATURE,
    )
    return NativeReplayServer([spec], seed=3)


def _items(start: int, count: int) -> tuple[list[list[np.ndarray]], np.ndarray]:
    values = np.arange(start, start + count)
    return [[np.full(3, v, np.float32), np.int32(v)] for v in values], 0.25 + (values * 7 % 5).astype(np.float64)


def _held(server: NativeReplayServer) -> list[list]:
    """The table's items, oldest first: key, priority, times sampled, their data; and its counts."""
    table = server._tables["t"]
    live = np.flatnonzero(table._key)
    order = live[np.argsort(table._serial[live])]
    data = server._store.gather_rows(table._lane[order], table._rows[order, :1])
    info = server.server_info()["t"]
    return [
        table._key[order].tolist(),
        table._priority[order].tolist(),
        table._times[order].tolist(),
        *[column.tolist() for column in data],
        [info["current_size"], info["inserts"], info["deletes"], info["samples"]],
    ]


def _sampled(server: NativeReplayServer) -> list:
    got = server.sample("t", 9, 1.0)
    return [got["key"].tolist(), got["probability"].tolist(), got["times_sampled"].tolist(), got["columns"][1].tolist()]


def _runs_match(sampler: str, remover: str) -> bool:
    """Whether runs of ``insert_items`` (lengths 1 to ``MAX_SIZE``) leave the table as
    ``append_item`` one at a time does, before and after samples (which count and draw)."""
    one, run = _server(sampler, remover), _server(sampler, remover)
    writer = one.client.writer(1, 1.0)
    try:
        start, same = 0, True
        for length in [4, 3, 1, 6, 5, 2, 6, 6, 3, 4, 1, 5]:
            items, priorities = _items(start, length)
            for columns, priority in zip(items, priorities.tolist()):
                writer.append_item("t", priority, columns)
            message = [["t", priorities, [np.stack([c[k] for c in items]) for k in range(2)]]]
            assert run.insert_items(message, 1.0) == length
            same = same and _held(one) == _held(run)
            if length % 2:  # (samples between runs: times sampled, the generator's state)
                same = same and _sampled(one) == _sampled(run)
            start += length
        return same and _held(one) == _held(run)
    finally:
        writer.close()
        one.stop()
        run.stop()


@pytest.mark.parametrize("remover", REMOVERS)
@pytest.mark.parametrize("sampler", ["uniform", "prioritized", "fifo", "lifo"])
def test_a_run_of_inserts_into_a_full_table_removes_what_one_at_a_time_would(sampler, remover):
    assert _runs_match(sampler, remover)


def _naive_uniform(self, rng, priorities):  # (positions drawn at once, read off the array as it is now)
    slots = self._keys[rng.integers(self._size, size=len(priorities))].copy()
    self.replace_many(slots, priorities)
    return slots


def _naive_prioritized(self, rng, priorities):  # (a whole batch drawn on the tree before the run)
    slots = self.select_many(rng, len(priorities))[0]
    self.replace_many(slots, priorities)
    return slots


def _reversed_fifo(self, rng, priorities):  # (the oldest, newest of them first)
    slots = self.oldest(len(priorities))[::-1].copy()
    self.replace_many(slots, priorities)
    return slots


def _lifo_of_old_items(self, rng, priorities):  # (the newest items before the run, as if no new one came)
    slots = self._keys[np.flatnonzero(self._live[: self._tail])[::-1][: len(priorities)]].copy()
    self.replace_many(slots, priorities)
    return slots


def _uniform_deletes_then_inserts(self, slots, priorities, distinct=False):  # (all removals first: another dense order)
    self.delete_many(np.unique(slots))
    self.insert_many(slots[sel.last_of_each(slots)], priorities)


BROKEN = {
    "fifo": (sel.FifoSelector, "remove_insert_many", _reversed_fifo, "uniform"),
    "lifo": (sel.LifoSelector, "remove_insert_many", _lifo_of_old_items, "uniform"),
    "uniform": (sel.UniformSelector, "remove_insert_many", _naive_uniform, "prioritized"),
    "prioritized": (sel.PrioritizedSelector, "remove_insert_many", _naive_prioritized, "uniform"),
    "uniform sampler": (sel.UniformSelector, "replace_many", _uniform_deletes_then_inserts, "fifo"),
}


@pytest.mark.parametrize("broken", list(BROKEN))
def test_the_check_sees_a_broken_removal_choice(broken, monkeypatch):
    cls, method, replacement, other = BROKEN[broken]
    monkeypatch.setattr(cls, method, replacement)
    if broken == "uniform sampler":
        assert not _runs_match("uniform", other)
    else:
        assert not _runs_match(other, broken)


@pytest.mark.parametrize("seed", range(20))
def test_uniform_replacements_follow_the_swaps_one_at_a_time_make(seed):
    """``UniformSelector``'s run of replacements (drawn, and of given slots) against the
    selector's own ``delete``/``insert`` one at a time, on small arrays that repeat places."""
    rng = np.random.default_rng(seed)
    size = int(rng.integers(1, 9))
    slots = rng.permutation(20)[:size]
    fast, slow = sel.UniformSelector(), sel.UniformSelector()
    for selector in (fast, slow):
        selector.insert_many(slots, np.ones(size))
    count = int(rng.integers(1, 3 * size + 2))
    draws = np.random.default_rng(seed + 100)
    got = fast.remove_insert_many(draws, np.ones(count))
    want = []
    for place in np.random.default_rng(seed + 100).integers(size, size=count).tolist():
        slot = int(slow._keys[place])
        slow.delete(slot)
        slow.insert(slot, 1.0)
        want.append(slot)
    assert got.tolist() == want
    assert fast._keys[:size].tolist() == slow._keys[:size].tolist()
    for distinct in (False, True) if len(set(want)) == count else (False,):  # (and the distinct slots' shortcut)
        again = sel.UniformSelector()
        again.insert_many(slots, np.ones(size))
        again.replace_many(np.array(want, np.int64), np.ones(count), distinct)
        assert again._keys[:size].tolist() == slow._keys[:size].tolist()
        assert (again._position[again._keys[:size]] == np.arange(size)).all()


@pytest.mark.parametrize("seed", range(10))
def test_uniform_replacements_of_distinct_slots_as_one_at_a_time(seed):
    """``replace_many(..., distinct=True)`` (a FIFO remover's oldest items) against ``delete`` and
    ``insert`` one at a time, with and without the last slot among them."""
    rng = np.random.default_rng(seed)
    size = int(rng.integers(2, 12))
    slots = rng.permutation(30)[:size]
    chosen = rng.permutation(slots)[: int(rng.integers(1, size + 1))]
    fast, slow = sel.UniformSelector(), sel.UniformSelector()
    for selector in (fast, slow):
        selector.insert_many(slots, np.ones(size))
    for slot in chosen.tolist():
        slow.delete(slot)
        slow.insert(slot, 1.0)
    fast.replace_many(chosen, np.ones(len(chosen)), True)
    assert fast._keys[:size].tolist() == slow._keys[:size].tolist()
    assert (fast._position[fast._keys[:size]] == np.arange(size)).all()


@pytest.mark.parametrize("remover", REMOVERS)
def test_a_run_held_back_by_the_rate_limiter_takes_as_many_as_one_at_a_time(remover):
    """With a limiter (nine inserts ahead of the samples at most) a run takes exactly the items
    one-at-a-time inserts take before one is held back, removals of the full table counted, and
    the table is left the same."""

    def server() -> NativeReplayServer:
        spec = TableSpec(
            "t", "uniform", remover, MAX_SIZE, RateLimit(1.0, 1, -1e9, 9.0), priority_exponent=0.7, signature=SIGNATURE
        )
        return NativeReplayServer([spec], seed=5)

    one, run = server(), server()
    writer = one.client.writer(1, 0.0)
    try:
        items, priorities = _items(0, 14)
        taken = 0
        for columns, priority in zip(items, priorities.tolist()):
            try:
                writer.append_item("t", priority, columns)
            except TimeoutError:
                break
            taken += 1
        message = [["t", priorities, [np.stack([c[k] for c in items]) for k in range(2)]]]
        assert run.insert_items(message, 0.0) == taken == 9
        assert _held(one) == _held(run)
        assert _sampled(one) == _sampled(run)
    finally:
        with contextlib.suppress(TimeoutError):  # (the item held back, if no sample made room)
            writer.close()
        one.stop()
        run.stop()


def _pairs_match(sampler: str, remover: str) -> bool:
    """Whether ``append_item`` one at a time leaves the table as the original item loop does
    (``Table.insert_many`` of two items at a time: the path that holds no shortcut)."""
    one, ref = _server(sampler, remover), _server(sampler, remover)
    writer = one.client.writer(1, 1.0)
    table = ref._tables["t"]
    try:
        start, same = 0, True
        for length in [4, 3, 1, 6, 5, 2, 6, 6, 3, 4, 1, 5]:
            items, priorities = _items(start, length + length % 2)  # (pairs: an even count)
            for columns, priority in zip(items, priorities.tolist()):
                writer.append_item("t", priority, columns)
            held = [(Rows(*ref._store.add_item_step(c)), p) for c, p in zip(items, priorities.tolist())]
            for i in range(0, len(held), 2):
                assert table.insert_many(held[i : i + 2], time.monotonic() + 1.0) == 2
            same = same and _held(one) == _held(ref)
            if length % 2:
                same = same and _sampled(one) == _sampled(ref)
            start += len(items)
        return same
    finally:
        writer.close()
        one.stop()
        ref.stop()


@pytest.mark.parametrize("remover", REMOVERS)
@pytest.mark.parametrize("sampler", ["uniform", "prioritized", "fifo", "lifo"])
def test_one_at_a_time_is_the_original_item_loop(sampler, remover):
    assert _pairs_match(sampler, remover)


@pytest.mark.parametrize("bad", [float("nan"), -1.0, float("inf")])
def test_a_bad_priority_in_process_is_one_line_and_the_full_table_untouched(bad):
    server = _server("prioritized", "fifo")
    writer = server.client.writer(1, 1.0)
    try:
        items, priorities = _items(0, MAX_SIZE + 1)
        for columns, priority in zip(items[:MAX_SIZE], priorities.tolist()):
            writer.append_item("t", priority, columns)
        before = _held(server)
        with pytest.raises(ValueError, match=f"^priorities must be finite numbers >= 0, got {bad}$"):
            writer.append_item("t", bad, items[MAX_SIZE])
        assert _held(server) == before
        writer.append_item("t", 1.0, items[MAX_SIZE])  # (the next good one goes in, the oldest out)
        assert _held(server)[-1][:3] == [MAX_SIZE, MAX_SIZE + 1, 1]  # (size, inserts, deletes)
    finally:
        writer.close()
        server.stop()
