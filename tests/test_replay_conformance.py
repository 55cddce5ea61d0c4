"""The replay contract, one suite for both backends: what "Reverb's semantics" means for Shoal.

Every test runs on each backend this Python has (native everywhere; Reverb on Python 3.11),
through the contract's own pieces: ``make_replay_server``, the client's writer (what adders
write through), and sampling as the datasets do. Distributions are checked with a chi-square
test (native: seeded, so the statistic is the same every run; Reverb samples unseeded, so its
threshold is one that a correct selector fails once in a million runs).
"""

from __future__ import annotations

import contextlib
import math
import threading
import time

import numpy as np
import pytest

from shoal.core.specs import ArraySpec
from shoal.replay import RateLimit, TableSpec, make_replay_server, reverb_installed

BACKENDS = ["native"] + (["reverb"] if reverb_installed() else [])
SIGNATURE = {"value": ArraySpec((), np.float32)}
FREE = RateLimit(1.0, 1, -1e300, 1e300)  # Reverb's MinSize(1): never blocks
P_FLOOR = 1e-6  # a correct selector's chi-square p-value falls below this once in a million


@pytest.fixture(params=BACKENDS)
def backend(request) -> str:
    return request.param


def table(name="t", sampler="uniform", remover="fifo", max_size=1000, rate_limit=FREE, **kwargs) -> TableSpec:
    return TableSpec(
        name, sampler=sampler, remover=remover, max_size=max_size, rate_limit=rate_limit, signature=SIGNATURE, **kwargs
    )


class Replay:
    """A server of ``tables`` on ``backend``, written and sampled as Shoal's adders and datasets do."""

    def __init__(self, backend: str, *tables: TableSpec, checkpoint_dir: str | None = None, seed: int = 0) -> None:
        self.backend = backend
        self.server = make_replay_server(list(tables), backend, checkpoint_dir=checkpoint_dir, seed=seed)
        self.client = self.server.client
        self.writer = self.client.writer(1, timeout_s=30.0)

    def insert(self, values, table="t", priorities=None, timeout_s: float | None = None) -> None:
        if timeout_s is not None:
            self.writer.timeout_s = timeout_s
        for i, value in enumerate(values):
            self.writer.append([np.float32(value)])
            self.writer.create_item(table, 1.0 if priorities is None else float(priorities[i]), 1)
            self.writer.commit()
        self.writer.flush()

    def sample(self, n: int, table="t", timeout_s: float = 30.0) -> list[dict]:
        """Up to ``n`` items (fewer if the limiter held one back for ``timeout_s``): value, key,
        probability, priority, times_sampled each. (On Reverb, a ``timeout_s`` over a second
        means the items are there.)"""
        if self.backend == "native":
            out = []
            while len(out) < n:
                got = self.client.sample_batch(table, n - len(out), timeout_s)
                if got is None:
                    break
                for i in range(len(got["key"])):
                    out.append(
                        {
                            "value": float(got["columns"][0][i]),
                            "key": int(got["key"][i]),
                            "probability": float(got["probability"][i]),
                            "priority": float(got["priority"][i]),
                            "times_sampled": int(got["times_sampled"][i]),
                        }
                    )
            return out
        import reverb

        if timeout_s > 1:  # (items are there: Reverb's client samples exactly n, with no timeout)
            return [
                {
                    "value": float(s.data["value"]),
                    "key": int(s.info.key),
                    "probability": float(s.info.probability),
                    "priority": float(s.info.priority),
                    "times_sampled": int(s.info.times_sampled),
                }
                for s in reverb.Client(self.server.address).sample(
                    table, num_samples=n, emit_timesteps=False, unpack_as_table_signature=True
                )
            ]
        # (a short timeout: the sample is expected to time out; Reverb's dataset can say so)
        dataset = reverb.TrajectoryDataset.from_table_signature(
            self.server.address,
            table,
            max_in_flight_samples_per_worker=1,
            num_workers_per_iterator=1,
            rate_limiter_timeout_ms=int(timeout_s * 1000),
        )
        return [
            {
                "value": float(s.data["value"]),
                "key": int(s.info.key),
                "probability": float(s.info.probability),
                "priority": float(s.info.priority),
                "times_sampled": int(s.info.times_sampled),
            }
            for s in dataset.take(n).as_numpy_iterator()
        ]

    def size(self, table="t") -> int:
        return int(self.client.server_info()[table].current_size)

    def close(self) -> None:
        self.writer.close()
        self.server.stop()


@pytest.fixture
def replays():
    made: list[Replay] = []
    yield made
    for replay in made:
        replay.close()


def open_replay(replays, backend, *tables, **kwargs) -> Replay:
    replay = Replay(backend, *tables, **kwargs)
    replays.append(replay)
    return replay


def chi_square_p(counts: np.ndarray, probabilities: np.ndarray) -> float:
    from scipy.stats import chisquare

    expected = probabilities * counts.sum()
    return float(chisquare(counts, expected).pvalue)


def counts_of(samples: list[dict], values: list[float]) -> np.ndarray:
    index = {v: i for i, v in enumerate(values)}
    counts = np.zeros(len(values))
    for s in samples:
        counts[index[s["value"]]] += 1
    return counts


def threshold(backend: str) -> float:
    return 0.01 if backend == "native" else P_FLOOR


def test_uniform_sampling_is_uniform(backend, replays):
    replay = open_replay(replays, backend, table())
    values = [float(v) for v in range(8)]
    replay.insert(values)
    samples = replay.sample(4000)
    assert len(samples) == 4000
    assert all(math.isclose(s["probability"], 1 / 8, rel_tol=1e-6) for s in samples)
    assert chi_square_p(counts_of(samples, values), np.full(8, 1 / 8)) > threshold(backend)


@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.0])
def test_prioritized_sampling_follows_priority_to_the_alpha(backend, replays, alpha):
    replay = open_replay(replays, backend, table(sampler="prioritized", priority_exponent=alpha))
    values, priorities = [0.0, 1.0, 2.0, 3.0], np.array([1.0, 2.0, 4.0, 8.0])
    replay.insert(values, priorities=priorities)
    expected = priorities**alpha / (priorities**alpha).sum()
    samples = replay.sample(4000)
    for s in samples[:50]:  # (the probability each sample reports is its item's)
        assert math.isclose(s["probability"], expected[int(s["value"])], rel_tol=1e-5)
    assert chi_square_p(counts_of(samples, values), expected) > threshold(backend)


@pytest.mark.parametrize("sampler", ["fifo", "lifo"])
def test_fifo_and_lifo_samplers_take_the_oldest_or_newest(backend, replays, sampler):
    replay = open_replay(replays, backend, table(sampler=sampler, max_times_sampled=1))
    replay.insert([0.0, 1.0, 2.0, 3.0, 4.0])
    got = [s["value"] for s in replay.sample(5)]
    assert got == ([0.0, 1.0, 2.0, 3.0, 4.0] if sampler == "fifo" else [4.0, 3.0, 2.0, 1.0, 0.0])
    assert replay.size() == 0


def test_fifo_remover_keeps_the_newest_max_size_items(backend, replays):
    replay = open_replay(replays, backend, table(sampler="fifo", max_size=3, max_times_sampled=1))
    replay.insert([float(v) for v in range(7)])
    assert replay.size() == 3
    assert [s["value"] for s in replay.sample(3)] == [4.0, 5.0, 6.0]


def test_items_go_after_max_times_sampled(backend, replays):
    replay = open_replay(replays, backend, table(sampler="fifo", max_times_sampled=2))
    replay.insert([0.0, 1.0])
    samples = replay.sample(4)
    assert [s["value"] for s in samples] == [0.0, 0.0, 1.0, 1.0]
    assert [s["times_sampled"] for s in samples] == [1, 2, 1, 2]
    assert replay.size() == 0


def test_samples_wait_below_min_size_until_an_insert_releases_them(backend, replays):
    limit = RateLimit(1.0, 3, -1e300, 1e300)  # (MinSize(3))
    replay = open_replay(replays, backend, table(rate_limit=limit))
    replay.insert([0.0, 1.0])
    assert not replay.server.can_sample("t", 1)
    assert replay.sample(1, timeout_s=0.2) == []  # the timeout fires: nothing sampled
    got: list = []
    sampler = threading.Thread(target=lambda: got.extend(replay.sample(1, timeout_s=60)))
    sampler.start()
    replay.insert([2.0])  # (the third item: the waiting sample goes through)
    sampler.join(timeout=60)
    assert not sampler.is_alive() and len(got) == 1


def test_samples_wait_when_they_run_ahead_of_inserts(backend, replays):
    limit = RateLimit.sample_to_insert_ratio(2.0, 2, 2.0)  # 2 samples per insert, from 2 items, +-2
    replay = open_replay(replays, backend, table(rate_limit=limit))
    replay.insert([0.0, 1.0])
    # inserts * 2 - samples - 1 >= min_diff (= 2): 4 - s - 1 >= 2 lets s = 0 and 1 through
    assert len(replay.sample(2)) == 2
    assert not replay.server.can_sample("t", 1)
    assert replay.sample(1, timeout_s=0.2) == []
    replay.insert([2.0])
    assert replay.server.can_sample("t", 2) and not replay.server.can_sample("t", 3)
    assert len(replay.sample(2)) == 2


def test_inserts_wait_while_samples_lag_and_time_out_in_one_clear_error(backend, replays):
    limit = RateLimit.sample_to_insert_ratio(1.0, 1, 1.0)  # one sample per insert, from 1 item, +-1
    replay = open_replay(replays, backend, table(rate_limit=limit))
    # the first insert is free (min size); then (inserts + 1) * 1 - samples <= max_diff (= 2) lets one more in
    replay.insert([0.0, 1.0])
    with pytest.raises(TimeoutError, match="replay table 't'"):
        replay.insert([2.0], timeout_s=0.3)
    assert replay.size() == 2
    assert len(replay.sample(2)) == 2  # the learner catches up: the held insert goes through, and one more
    replay.insert([3.0], timeout_s=30)
    assert replay.size() == 4


def test_a_queue_holds_inserts_at_capacity(backend, replays):
    from shoal.replay import make_queue_table

    queue = make_queue_table("t", SIGNATURE, capacity=2)
    replay = open_replay(replays, backend, queue)
    replay.insert([0.0, 1.0])
    with pytest.raises(TimeoutError):
        replay.insert([2.0], timeout_s=0.3)
    assert replay.size() == 2
    assert [s["value"] for s in replay.sample(2)] == [0.0, 1.0]  # oldest first, each once
    replay.insert([], timeout_s=30)  # the item that timed out is still the writer's: it goes in now
    assert replay.size() == 1
    assert [s["value"] for s in replay.sample(1)] == [2.0]


def test_priority_updates_change_what_is_sampled(backend, replays):
    replay = open_replay(replays, backend, table(sampler="prioritized", priority_exponent=1.0))
    replay.insert([0.0, 1.0], priorities=[1.0, 1.0])
    keys = {s["value"]: s["key"] for s in replay.sample(40)}
    replay.client.mutate_priorities("t", updates={keys[0.0]: 0.0, keys[1.0]: 5.0})
    samples = replay.sample(200)
    assert {s["value"] for s in samples} == {1.0}
    assert all(s["priority"] == 5.0 and math.isclose(s["probability"], 1.0) for s in samples)


def test_concurrent_writers_and_a_sampler_lose_and_repeat_nothing(backend, replays):
    queue = TableSpec(
        "t",
        sampler="fifo",
        remover="fifo",
        max_size=64,
        max_times_sampled=1,
        rate_limit=RateLimit(1.0, 1, 0.0, 64.0),
        signature=SIGNATURE,
    )
    replay = open_replay(replays, backend, queue)
    writers = [replay.client.writer(1, timeout_s=60.0) for _ in range(4)]

    def write(w: int) -> None:
        for i in range(150):
            writers[w].append([np.float32(w * 1000 + i)])
            writers[w].create_item("t", 1.0, 1)
            writers[w].commit()
        writers[w].flush()

    threads = [threading.Thread(target=write, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    got = replay.sample(600, timeout_s=60)
    for t in threads:
        t.join(timeout=60)
    for w in writers:
        w.close()
    values = sorted(s["value"] for s in got)
    assert values == sorted(float(w * 1000 + i) for w in range(4) for i in range(150))
    for w in range(4):  # each writer's items in its order
        mine = [s["value"] for s in got if w * 1000 <= s["value"] < (w + 1) * 1000]
        assert mine == sorted(mine)


def test_checkpoint_and_restore_keep_every_item_and_count(backend, replays, tmp_path):
    spec = table(sampler="fifo", remover="fifo", max_size=10, max_times_sampled=3)
    first = open_replay(replays, backend, spec, checkpoint_dir=str(tmp_path))
    first.insert([float(v) for v in range(12)], priorities=[float(v + 1) for v in range(12)])
    first.sample(2)  # item 2 sampled twice
    path = first.client.checkpoint()
    assert path.startswith(str(tmp_path))
    info = first.client.server_info()["t"]
    first.close()
    replays.remove(first)
    second = open_replay(replays, backend, spec, checkpoint_dir=str(tmp_path))
    again = second.client.server_info()["t"]
    assert again.current_size == info.current_size == 10
    assert again.rate_limiter_info.insert_stats.completed == info.rate_limiter_info.insert_stats.completed == 12
    assert again.rate_limiter_info.sample_stats.completed == 2
    items = second.sample(1 + 9 * 3)
    by_value: dict[float, list] = {}
    for s in items:
        by_value.setdefault(s["value"], []).append((s["priority"], s["times_sampled"]))
    assert sorted(by_value) == [float(v) for v in range(2, 12)]
    assert by_value[2.0] == [(3.0, 3)]  # (sampled twice before the checkpoint: once more left)
    assert by_value[5.0] == [(6.0, 1), (6.0, 2), (6.0, 3)]


def test_a_server_that_goes_away_fails_the_writer_in_one_clear_error(backend, replays):
    replay = open_replay(replays, backend, table())
    replay.insert([0.0])
    replay.server.stop()
    with pytest.raises(Exception) as raised:
        replay.insert([1.0, 2.0], timeout_s=0.5)  # (Reverb's writer waits it out)
        replay.writer.flush()
    assert "\n" not in str(raised.value).strip()
    replay.writer.close()  # (closing a writer of a gone server raises nothing more)


def test_a_writer_that_stops_gives_up_what_the_limiter_holds_back_within_its_timeout(backend, replays):
    from shoal.replay import make_queue_table

    replay = open_replay(replays, backend, make_queue_table("t", SIGNATURE, capacity=2))
    replay.insert([0.0, 1.0])
    replay.writer.timeout_s = 0.2
    for value in (2.0, 3.0):  # (the queue is full: these wait for a sample that never comes)
        replay.writer.append([np.float32(value)])
        replay.writer.create_item("t", 1.0, 1)
        with contextlib.suppress(TimeoutError):  # (a writer in the server's process inserts at once)
            replay.writer.commit()
    replay.writer.timeout_s = 30.0
    started = time.monotonic()
    assert replay.writer.close(timeout_s=0.5) is False
    assert time.monotonic() - started < 10
    assert replay.size() == 2
    assert [s["value"] for s in replay.sample(2)] == [0.0, 1.0]
    if backend == "reverb":  # (Reverb's server may still insert items it was sent before the close)
        return
    replay.writer = replay.client.writer(1, timeout_s=30.0)  # (the table goes on: a new writer's item goes in)
    replay.insert([4.0])
    assert [s["value"] for s in replay.sample(1)] == [4.0]


def test_a_writer_whose_items_all_went_in_closes_confirmed(backend, replays):
    replay = open_replay(replays, backend, table())
    replay.writer.append([np.float32(0.0)])
    replay.writer.create_item("t", 1.0, 1)
    replay.writer.commit()
    assert replay.writer.close(timeout_s=5.0) is True
    assert replay.size() == 1
