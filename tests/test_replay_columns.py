"""Native replay's columnar store and its batch selectors (``replay/native/columns.py``,
``replay/native/selectors.py``): the same semantics as one item at a time, in array operations.

* ``select_many(rng, B)`` makes the very draws ``B`` calls of ``select`` make (same keys, same
  probabilities, same generator state after): a seeded run samples the same items either way.
* Batches follow the selector's distribution (chi-square at a fixed seed), and each check fails
  on a deliberately broken selector (``BROKEN``), so that a check that cannot fail is caught here.
* ``ColumnStore`` keeps a step once however many items use it, gathers a batch with one
  indexing per column, and gives a row back when its last user goes.
* A property test (hypothesis) drives random interleavings of inserts, samples, priority
  updates, deletions and checkpoint/restore against a plain-Python model of a table and finds
  no difference.
"""

from __future__ import annotations

import dataclasses
import pathlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy import stats

from shoal.core.specs import ArraySpec
from shoal.replay import RateLimit, TableSpec
from shoal.replay.native import NativeReplayServer
from shoal.replay.native.columns import ColumnStore
from shoal.replay.native.selectors import PrioritizedSelector, UniformSelector

P_FLOOR = 1e-4  # (seeded: the statistic is the same every run; a correct selector passes far above it)


def _filled(selector, priorities: list[float]):
    for key, priority in enumerate(priorities, start=10):
        selector.insert(key, priority)
    return selector


@pytest.mark.parametrize("kind", ["uniform", "prioritized"])
def test_select_many_makes_the_draws_of_select_one_at_a_time(kind):
    rng = np.random.default_rng(7)
    priorities = (rng.random(300) * 5).tolist()
    priorities[::17] = [0.0] * len(priorities[::17])

    def make():
        selector = UniformSelector() if kind == "uniform" else PrioritizedSelector(0.6)
        _filled(selector, priorities)
        for key in range(10, 310, 7):  # (deleted keys: holes in the sum tree, swaps in the array)
            selector.delete(key)
        return selector

    one, many = make(), make()
    rng_one, rng_many = np.random.default_rng(3), np.random.default_rng(3)
    singles = [one.select(rng_one) for _ in range(1000)]
    keys, probabilities = many.select_many(rng_many, 1000)
    assert keys.tolist() == [k for k, _ in singles]
    np.testing.assert_array_equal(probabilities, [p for _, p in singles])
    assert rng_one.bit_generator.state == rng_many.bit_generator.state


def test_select_many_with_every_weight_zero_is_uniform_as_select_is():
    one, many = _filled(PrioritizedSelector(1.0), [0.0] * 20), _filled(PrioritizedSelector(1.0), [0.0] * 20)
    rng_one, rng_many = np.random.default_rng(1), np.random.default_rng(1)
    keys, probabilities = many.select_many(rng_many, 50)
    assert keys.tolist() == [one.select(rng_one)[0] for _ in range(50)]
    assert np.all(probabilities == 1 / 20)


def test_update_many_builds_the_tree_that_updates_one_at_a_time_build():
    rng = np.random.default_rng(0)
    priorities = rng.random(100).tolist()
    one, many = _filled(PrioritizedSelector(0.7), priorities), _filled(PrioritizedSelector(0.7), priorities)
    keys = rng.choice(np.arange(10, 110), 40, replace=False).tolist()
    new = (rng.random(40) * 3).tolist()
    for key, priority in zip(keys, new):
        one.update(key, priority)
    many.update_many(keys, new)
    np.testing.assert_array_equal(one._tree, many._tree)


def test_update_many_refuses_a_nan_or_negative_priority():
    selector = _filled(PrioritizedSelector(1.0), [1.0, 2.0])
    for bad in (float("nan"), -1.0):
        with pytest.raises(ValueError, match="priority must be a number >= 0"):
            selector.update_many([10], [bad])


# -- distributions of whole batches -----------------------------------------------------------------
class BrokenPrioritized(PrioritizedSelector):
    """Ignores the exponent (samples by raw priority): what a check of ``p ** alpha`` must catch."""

    def _weight(self, priority: float) -> float:
        return float(priority)


class BrokenUniform(UniformSelector):
    """Never draws the last key (an off-by-one): what a uniformity check must catch."""

    def select_many(self, rng, count):
        keys, probabilities = super().select_many(rng, count)
        return np.where(keys == self._keys[self._size - 1], self._keys[0], keys), probabilities


def _batch_p_value(selector, expected: dict[int, float], batches: int = 100, batch: int = 256) -> float:
    rng = np.random.default_rng(11)
    drawn = np.concatenate([selector.select_many(rng, batch)[0] for _ in range(batches)])
    keys = sorted(expected)
    counts = np.array([(drawn == k).sum() for k in keys])
    probabilities = np.array([expected[k] for k in keys])
    return float(stats.chisquare(counts, probabilities / probabilities.sum() * counts.sum()).pvalue)


@pytest.mark.parametrize("broken", [False, True])
def test_batches_of_a_prioritized_selector_follow_priority_to_the_alpha(broken):
    priorities = [0.5, 1.0, 2.0, 4.0, 8.0, 0.0, 3.0]
    selector = _filled((BrokenPrioritized if broken else PrioritizedSelector)(0.6), priorities)
    expected = {k: p**0.6 for k, p in enumerate(priorities, start=10) if p > 0}
    p_value = _batch_p_value(selector, expected)
    assert (p_value < P_FLOOR) == broken, p_value


@pytest.mark.parametrize("broken", [False, True])
def test_batches_of_a_uniform_selector_are_uniform(broken):
    selector = _filled(BrokenUniform() if broken else UniformSelector(), [1.0] * 20)
    for key in (12, 15):  # (deleted keys must not be drawn: the swapped-in keys must)
        selector.delete(key)
    p_value = _batch_p_value(selector, {k: 1.0 for k in range(10, 30) if k not in (12, 15)})
    assert (p_value < P_FLOOR) == broken, p_value


# -- the column store -------------------------------------------------------------------------------
def test_column_store_keeps_shared_steps_once_and_frees_them_with_their_last_item():
    store = ColumnStore()
    block = [np.arange(6, dtype=np.float32).reshape(3, 2), np.arange(3, dtype=np.int32)]
    store.add_rows([("w", 0), ("w", 1), ("w", 2)], block)
    first, second = store.hold([("w", 0), ("w", 1)]), store.hold([("w", 1), ("w", 2)])  # (overlapping)
    store.let_go([("w", 0), ("w", 1), ("w", 2), ("w", 2)])  # (the writer lets go, once however often)
    assert len(store) == 3  # (one row per step, the shared one once)
    columns = store.gather([first, second, first])
    np.testing.assert_array_equal(columns[0], [[[0, 1], [2, 3]], [[2, 3], [4, 5]], [[0, 1], [2, 3]]])
    np.testing.assert_array_equal(columns[1], [[0, 1], [1, 2], [0, 1]])
    store.release(first)
    assert len(store) == 2 and ("w", 0) not in store
    store.release(second)
    assert len(store) == 0
    store.add_rows([("v", 0)], [np.ones((1, 2), np.float32), np.zeros(1, np.int32)])  # (a freed row reused)
    assert len(store) == 1 and store.nbytes() == store._lanes[0].capacity * (8 + 4)


def test_a_full_table_of_cartpole_transitions_costs_at_most_one_and_a_half_times_their_bytes():
    envs, items = 16, 2000
    signature = {
        "observation": ArraySpec((envs, 4), np.float32),
        "action": ArraySpec((envs,), np.int32),
        "reward": ArraySpec((envs,), np.float32),
        "discount": ArraySpec((envs,), np.float32),
        "next_observation": ArraySpec((envs, 4), np.float32),
    }
    spec = TableSpec(
        "t",
        sampler="uniform",
        remover="fifo",
        max_size=items,
        rate_limit=RateLimit(1.0, 1, -1e300, 1e300),
        signature=signature,
    )
    server = NativeReplayServer([spec], seed=0)
    writer = server.client.writer(1, timeout_s=10)
    columns = [np.zeros(s.shape, s.dtype) for s in (signature[k] for k in sorted(signature))]
    for _ in range(3 * items):  # (three times over: the remover's rows are reused, nothing grows)
        writer.append(columns)
        writer.create_item("t", 1.0, 1)
        writer.commit()
    writer.flush()
    raw = items * envs * (4 * 4 + 4 + 4 + 4 + 4 * 4)
    assert server.server_info()["t"]["current_size"] == items
    assert server._store.nbytes() <= 1.5 * raw, (server._store.nbytes(), raw)
    server.stop()


# -- random interleavings against a model -----------------------------------------------------------
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("insert"), st.integers(1, 5), st.floats(0.0, 4.0)),
        st.tuples(st.just("sample"), st.integers(1, 40)),
        st.tuples(st.just("update"), st.integers(0, 60), st.floats(0.0, 4.0)),
        st.tuples(st.just("delete"), st.integers(0, 60)),
        st.just(("checkpoint",)),
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS, sampler=st.sampled_from(["uniform", "prioritized"]), max_size=st.integers(3, 12))
def test_random_interleavings_match_a_model_of_the_table(tmp_path_factory, ops, sampler, max_size):
    """The model: a dict key -> (value, priority) in insertion order, FIFO removal at
    ``max_size``; a sample's items are held items with their values and the selector's
    probabilities; a checkpoint restored into a new server holds the same items and counts."""
    from shoal.replay.native import frames

    alpha, window = 0.5, frames.WINDOW
    frames.WINDOW = 6  # (a small lookup window: frames leave it, are freed and reused within a run)
    spec = TableSpec(
        "t",
        sampler=sampler,
        remover="fifo",
        max_size=max_size,
        priority_exponent=alpha,
        rate_limit=RateLimit(1.0, 1, -1e300, 1e300),
        signature={"v": ArraySpec((2,), np.float32), "w": ArraySpec((4, 32, 32), np.uint8)},
    )
    directory = str(tmp_path_factory.mktemp("ckpt"))
    server = NativeReplayServer([spec], checkpoint_dir=directory, seed=5)
    writer = server.client.writer(3, timeout_s=10)
    model: dict[int, tuple[float, float]] = {}
    keys_by_value: dict[float, int] = {}
    value = 0.0
    inserts = samples = 0
    try:
        for op in ops:
            if op[0] == "insert":
                for _ in range(op[1]):
                    value += 1.0
                    writer.append([np.array([value, -value], np.float32), _stack(int(value))])
                    writer.create_item("t", op[2], 1)
                    writer.commit()
                    writer.flush()
                    if len(model) >= max_size:
                        del model[next(iter(model))]
                    model[-int(value)] = (value, op[2])  # (the key is learnt at the first sample)
                    inserts += 1
            elif op[0] == "sample" and model:
                served = server.sample("t", op[1], timeout_s=5)
                samples += op[1]
                assert served is not None and len(served["key"]) == op[1]
                weights = {
                    k: (1.0 if sampler == "uniform" else (p**alpha if p > 0 else 0.0)) for k, (_, p) in model.items()
                }
                total = sum(weights.values())
                for key, row, stack, probability, size in zip(
                    served["key"].tolist(), *served["columns"], served["probability"], served["table_size"]
                ):
                    v = float(row[0])
                    assert row[1] == -v and size == len(model)
                    assert np.array_equal(stack, _stack(int(v)))  # (its frames, pooled, rebuilt)
                    keys_by_value[v] = key
                    model_key = key if key in model else -int(v)
                    assert model_key in model and model[model_key][0] == v
                    if model_key != key:  # (learn the server's key)
                        model[key] = model.pop(model_key)
                        model = dict(sorted(model.items(), key=lambda kv: kv[1][0]))
                        weights[key] = weights.pop(model_key)
                    expected = 1 / len(model) if total == 0 else weights[key] / total
                    assert probability == pytest.approx(expected, rel=1e-9)
            elif op[0] in ("update", "delete") and model:
                known = [k for k in model if k > 0]
                if not known:
                    continue
                key = known[op[1] % len(known)]
                if op[0] == "update":
                    server.mutate_priorities("t", updates={key: op[2]})
                    model[key] = (model[key][0], op[2])
                else:
                    server.mutate_priorities("t", deletes=[key])
                    del model[key]
            elif op[0] == "checkpoint":
                writer.flush()
                path = server.checkpoint()
                restored = NativeReplayServer([spec], checkpoint_dir=directory, seed=5)
                try:
                    assert restored.restored_from == path
                    info = restored.server_info()["t"]
                    assert info["current_size"] == len(model)
                    assert info["inserts"] == inserts and info["samples"] == samples
                    if model:
                        served = restored.sample("t", 64, timeout_s=5)
                        assert {float(r[0]) for r in served["columns"][0]} <= {v for v, _ in model.values()}
                        for r, stack in zip(*served["columns"]):
                            assert np.array_equal(stack, _stack(int(r[0])))
                finally:
                    restored.stop()
            info = server.server_info()["t"]
            assert info["current_size"] == len(model)
            # (frames go with their last item: those of the items held, the writer's, the window's)
            shown = {(max(k, -1) + 1) % 251 for v, _ in model.values() for k in range(int(v) - 3, int(v) + 1)}
            assert server._store.frames_held() <= len(shown) + 4 + frames.WINDOW
        writer.close()
    finally:
        server.stop()
        frames.WINDOW = window


@pytest.mark.parametrize("kind", ["fifo", "lifo"])
def test_fifo_and_lifo_rings_take_the_oldest_or_newest_live_key_through_deletes_and_compactions(kind):
    """The ordered selectors keep keys in a ring of positions; keys deleted from inside are
    skipped; against a plain list over 5,000 random inserts and deletes (the ring compacts
    many times)."""
    from shoal.replay.native.selectors import FifoSelector, LifoSelector

    selector, model = (FifoSelector() if kind == "fifo" else LifoSelector()), []
    rng, key = np.random.default_rng(4), 0
    for _ in range(5000):
        if not model or rng.random() < 0.55:
            key += 1
            selector.insert(key, 1.0)
            model.append(key)
        else:
            gone = (
                model[int(rng.integers(len(model)))]
                if rng.random() < 0.5
                else (model[0] if kind == "fifo" else model[-1])
            )
            selector.delete(gone)
            model.remove(gone)
        if model:
            assert selector.select(rng)[0] == (model[0] if kind == "fifo" else model[-1])


def test_a_table_sized_for_a_million_atari_steps_takes_memory_only_as_it_fills():
    """Its columns are mapped for every row at once (~113 GB here) without reserving that much:
    the process grows by what is written, as the DQN Atari preset's 1M-item table needs."""
    import psutil

    frames = ArraySpec((2, 4, 84, 84), np.uint8)
    signature = {"observation": frames, "next_observation": frames}
    spec = TableSpec(
        "t",
        sampler="uniform",
        remover="fifo",
        max_size=10**6,
        rate_limit=RateLimit(1.0, 1, -1e300, 1e300),
        signature=signature,
    )
    rss = psutil.Process().memory_info().rss
    server = NativeReplayServer([spec], seed=0)
    writer = server.client.writer(1, timeout_s=10)
    step = [np.full((2, 4, 84, 84), 7, np.uint8), np.full((2, 4, 84, 84), 9, np.uint8)]
    for _ in range(20):
        writer.append(step)
        writer.create_item("t", 1.0, 1)
        writer.commit()
    writer.flush()
    served = server.sample("t", 4, 5.0)
    assert served["columns"][0].shape == (4, 2, 4, 84, 84) and (served["columns"][1] == 9).all()
    assert server._store.nbytes() > 100 * 2**30  # (mapped)
    assert psutil.Process().memory_info().rss - rss < 200 * 2**20  # (not taken)
    server.stop()


# -- frame stacks stored once -----------------------------------------------------------------------
def _atari_transitions(env_id: str, n_step: int, steps: int, num_envs: int = 4):
    """A real DQN Atari table's inserts: ale-py's frame-stacked env (episodes cut at 100 steps,
    so that several end and reset inside ``steps``), random actions, DQN's own n-step adder into
    a native server; ``(server, spec)``, every step inserted and flushed."""
    from shoal.core.specs import make_environment_spec
    from shoal.core.types import Step
    from shoal.envs.environments import final_observations
    from shoal.launch.experiments.config import experiment_config

    config = experiment_config(
        "dqn",
        env_id,
        num_envs=num_envs,
        env_args={"max_num_frames_per_episode": 400},
        agent_settings={"n_step": n_step, "min_replay_size": 8, "max_replay_size": 100_000},
    )
    env = config.make_env(num_envs, 0)
    spec = make_environment_spec(env)
    builder = config.builder
    tables = [
        dataclasses.replace(t, rate_limit=RateLimit(1.0, 1, -1e300, 1e300)) for t in builder.make_replay_tables(spec)
    ]
    server = NativeReplayServer(tables, seed=3)
    adder = builder.make_adder(server.client, spec)
    rng = np.random.default_rng(0)
    observation, _ = env.reset(seed=0)
    ends = 0
    for _ in range(steps):
        action = rng.integers(0, spec.num_actions, num_envs).astype(spec.action.dtype)
        next_obs, reward, terminated, truncated, info = env.step(action)
        adder.add(
            Step(
                observation,
                action,
                reward,
                terminated,
                truncated,
                final_observations(next_obs, terminated, truncated, info),
                {},
            )
        )
        ends += int((terminated | truncated).sum())
        observation = next_obs
    adder.flush()
    adder.close()
    env.close()
    assert ends >= num_envs * 2  # (episodes ended and the envs reset: stacks padded at their starts)
    return server, spec


def _batches(server, count: int = 6, size: int = 64):
    return [server.sample("transitions", size, 5.0) for _ in range(count)]


@pytest.mark.e2e  # (a real ALE env; ~10 s)
@pytest.mark.parametrize("n_step", [1, 3])
def test_atari_frame_stacks_are_stored_once_and_sampled_bit_for_bit_as_before(monkeypatch, tmp_path, n_step):
    """DQN's table of Pong transitions (4 envs, 300 steps, episodes ending and resetting) sampled
    with frames pooled is what it is with every stack stored as it came: the same keys, the same
    bytes, batch after batch under one seed; and it takes about an eighth of the memory. A
    checkpoint of it restores item for item (frames pooled again) and samples as it would have."""
    pytest.importorskip("ale_py")
    from shoal.replay.native import columns

    monkeypatch.setattr(columns, "FRAMES", False)
    plain, spec = _atari_transitions("ALE/Pong-v5", n_step, 300)
    monkeypatch.setattr(columns, "FRAMES", True)
    pooled, _ = _atari_transitions("ALE/Pong-v5", n_step, 300)
    directory = str(tmp_path / "ckpt")
    try:
        assert spec.observation.shape == (4, 84, 84) and spec.observation.dtype == np.uint8
        assert plain._store.frames_held() == 0 and pooled._store.frames_held() > 0
        for a, b in zip(_batches(plain), _batches(pooled)):
            assert a["key"].tolist() == b["key"].tolist()
            np.testing.assert_array_equal(a["probability"], b["probability"])
            assert len(a["columns"]) == len(b["columns"]) == 5
            for x, y in zip(a["columns"], b["columns"]):
                assert x.dtype == y.dtype and x.shape == y.shape
                assert np.array_equal(x, y)
        frame_bytes = 84 * 84
        plain_bytes, pooled_bytes = plain._store.used_bytes(), pooled._store.used_bytes()
        transitions = (300 - n_step + 1) * 4
        assert plain_bytes >= transitions * 8 * frame_bytes
        # one new frame per transition, the stacks' first frames at resets, final observations,
        # and the lookup window's frames: well under 2 frames a transition
        assert pooled_bytes < transitions * 2 * frame_bytes, (pooled_bytes, transitions)
        assert plain_bytes / pooled_bytes > 4, (plain_bytes, pooled_bytes)

        pooled._checkpoint_dir = directory
        path = pooled.checkpoint()
        restored = NativeReplayServer([t.spec for t in pooled._tables.values()], checkpoint_dir=directory, seed=3)
        try:
            assert restored.restored_from == path
            assert 0 < restored._store.frames_held() <= pooled._store.frames_held()
            after, again = _batches(pooled, 3), _batches(restored, 3)
            for a, b in zip(after, again):
                assert a["key"].tolist() == b["key"].tolist()
                for x, y in zip(a["columns"], b["columns"]):
                    assert np.array_equal(x, y)
        finally:
            restored.stop()
    finally:
        plain.stop()
        pooled.stop()


def _stack(t: int) -> np.ndarray:
    """Step ``t``'s stack of 4 32x32 frames, frames ``t-3 .. t`` (frame ``k`` filled with ``k + 1``
    modulo 251; before 0, zeros: an env's stack at its reset)."""
    return np.stack([np.full((32, 32), (max(k, -1) + 1) % 251, np.uint8) for k in range(t - 3, t + 1)])


def test_overlapping_sequences_of_frame_stacks_share_rows_and_frames():
    """Items of 3 steps every step (R2D2's overlap) over 10 steps of stacked frames: 10 rows, one
    frame per distinct frame (the zero frame of the reset once), each item gathered as written;
    the rows and frames go with the last item and the lookup window."""
    store = ColumnStore()
    observation = np.stack([_stack(t) for t in range(10)])
    next_observation = np.stack([_stack(t + 1) for t in range(10)])
    store.add_rows([("w", t) for t in range(10)], [observation, next_observation])
    items = [store.hold([("w", t) for t in range(s, s + 3)]) for s in range(8)]
    store.let_go([("w", t) for t in range(10)])
    assert len(store) == 10 and store.frames_held() == 1 + 11  # (zeros, frames 0..10)
    columns = store.gather(items)
    for s in range(8):
        np.testing.assert_array_equal(columns[0][s], observation[s : s + 3])
        np.testing.assert_array_equal(columns[1][s], next_observation[s : s + 3])
    row_bytes = 2 * 4 * 4  # (two columns of 4 frame indices)
    assert store.used_bytes() == 10 * row_bytes + 12 * 32 * 32
    for item in items:
        store.release(item)
    assert len(store) == 0 and store.frames_held() == 12  # (the lookup window's)
    store._pools[(32, 32)].forget()
    assert store.frames_held() == 0


def test_frames_equal_by_hash_but_not_by_bytes_stay_apart(monkeypatch):
    """The pool's key is a hint: planes whose keys collide (every key 0 here) but whose bytes
    differ are kept apart, within one call and against earlier ones."""
    from shoal.replay.native import frames

    monkeypatch.setattr(frames, "_hash", lambda planes: np.zeros(len(planes), np.uint64))
    store = ColumnStore()
    first = np.stack([_stack(3)])
    second = np.stack([_stack(5)])
    store.add_rows([("w", 0)], [first])
    store.add_rows([("w", 1)], [second])
    items = [store.hold([("w", 0)]), store.hold([("w", 1)])]
    columns = store.gather(items)
    np.testing.assert_array_equal(columns[0], np.concatenate([first, second]))


def test_without_frames_image_columns_are_kept_as_they_come():
    store = ColumnStore(frames=False)
    store.add_rows([("w", 0)], [np.stack([_stack(3)])])
    assert store.frames_held() == 0 and store.used_bytes() == 4 * 32 * 32


# -- items in arrays (slots) ------------------------------------------------------------------------
def _small_server(max_size: int, sampler: str = "uniform", checkpoint_dir: str | None = None):
    spec = TableSpec(
        "t",
        sampler=sampler,
        remover="fifo",
        max_size=max_size,
        priority_exponent=1.0,
        rate_limit=RateLimit(1.0, 1, -1e300, 1e300),
        signature={"v": ArraySpec((), np.float32)},
    )
    return NativeReplayServer([spec], checkpoint_dir=checkpoint_dir, seed=2)


def _insert(server, values, priority: float = 1.0) -> None:
    writer = server.client.writer(1, timeout_s=10)
    for v in values:
        writer.append([np.float32(v)])
        writer.create_item("t", priority, 1)
    writer.close()


def test_an_item_drawn_twice_in_one_batch_counts_as_two_samples_in_order():
    server = _small_server(4)
    _insert(server, [7.0])
    first, second = server.sample("t", 5, 5.0), server.sample("t", 3, 5.0)
    assert first["times_sampled"].tolist() == [1, 2, 3, 4, 5] and second["times_sampled"].tolist() == [6, 7, 8]
    assert len(set(first["key"].tolist() + second["key"].tolist())) == 1
    server.stop()


def test_a_key_whose_item_left_changes_nothing_though_its_slot_holds_another():
    server = _small_server(2, sampler="prioritized")
    _insert(server, [1.0, 2.0])
    keys = {}
    for _ in range(20):
        served = server.sample("t", 8, 5.0)
        keys.update(zip(served["columns"][0].tolist(), served["key"].tolist()))
    _insert(server, [3.0])  # (FIFO: item 1.0 goes, its slot is taken by 3.0)
    server.mutate_priorities("t", updates={keys[1.0]: 0.0}, deletes=[keys[1.0]])
    assert server.server_info()["t"]["current_size"] == 2
    values = server.sample("t", 400, 5.0)["columns"][0]
    assert set(values.tolist()) == {2.0, 3.0} and (values == 3.0).sum() > 100  # (3.0 kept its priority)
    server.mutate_priorities("t", updates={keys[2.0]: 0.0})  # (a live key: its item is never drawn again)
    assert set(server.sample("t", 100, 5.0)["columns"][0].tolist()) == {3.0}
    server.stop()


def test_a_checkpoint_whose_keys_name_no_slot_here_restores_item_for_item(tmp_path):
    """Keys of another numbering (an older server's counter: 1, 2, 3, ...) go back as they were,
    found through a dict: sampled with their values, updated and deleted by them."""
    import json

    server = _small_server(8, sampler="prioritized", checkpoint_dir=str(tmp_path))
    _insert(server, [10.0, 11.0, 12.0, 13.0])
    path = server.checkpoint()
    server.stop()
    record = json.loads(pathlib.Path(path, "tables.json").read_text())
    items = record["tables"]["t"]["items"]
    for item, key in zip(items, [1, 9, 17, 28]):  # (an 8-slot table reads slot key & 7: 1, 1, 1, 4)
        item[0] = key  # (9 and 17 name slot 1, which key 1 takes: they go elsewhere)
    pathlib.Path(path, "tables.json").write_text(json.dumps(record))
    restored = _small_server(8, sampler="prioritized", checkpoint_dir=str(tmp_path))
    served = restored.sample("t", 200, 5.0)
    by_key = dict(zip(served["key"].tolist(), served["columns"][0].tolist()))
    assert by_key == {1: 10.0, 9: 11.0, 17: 12.0, 28: 13.0}
    restored.mutate_priorities("t", updates={9: 0.0, 17: 0.0}, deletes=[1])
    assert set(restored.sample("t", 100, 5.0)["columns"][0].tolist()) == {13.0}
    _insert(restored, [14.0, 15.0])  # (new keys: none is an old one)
    served = restored.sample("t", 400, 5.0)
    assert len(set(served["key"].tolist())) == 3 and not {1, 9, 17} & set(served["key"].tolist())
    restored.stop()


def test_a_checkpoint_writes_frame_stacks_as_their_frames_once_and_restores_them_bit_for_bit(tmp_path):
    """Stacks of 4 frames, one new frame a step: the checkpoint's steps hold each frame once (not
    4 stacks' worth), restore rebuilds every stack as inserted; an index past the frames is refused."""
    import os
    import zipfile

    from shoal.replay.native.checkpoint_files import Damaged

    spec = TableSpec(
        "t",
        sampler="fifo",
        remover="fifo",
        max_size=100,
        max_times_sampled=1,
        rate_limit=RateLimit(1.0, 1, -1e300, 1e300),
        signature={"w": ArraySpec((4, 32, 32), np.uint8), "v": ArraySpec((), np.float32)},
    )
    server = NativeReplayServer([spec], checkpoint_dir=str(tmp_path), seed=0)
    writer = server.client.writer(1, timeout_s=10)
    for t in range(60):
        writer.append([np.float32(t), _stack(t)])  # (sorted: v, w)
        writer.create_item("t", 1.0, 1)
    writer.close()
    path = server.checkpoint()
    server.stop()
    with np.load(os.path.join(path, "steps.npz")) as steps:
        assert "l0_c1" not in steps.files and steps["l0_c1_index"].shape == (60, 4)
        assert len(steps["l0_c1_frames"]) == 60 + 1  # (frames 0..59 and the zero frame of the reset)
    assert os.path.getsize(os.path.join(path, "steps.npz")) < 61 * 32 * 32 + 60 * 64
    restored = NativeReplayServer([spec], checkpoint_dir=str(tmp_path), seed=0)
    got = restored.sample("t", 60, 5.0)
    restored.stop()
    assert got["columns"][0].tolist() == list(range(60))  # (FIFO: the order inserted)
    for t in range(60):
        np.testing.assert_array_equal(got["columns"][1][t], _stack(t))
    with np.load(os.path.join(path, "steps.npz")) as steps:
        arrays = {name: steps[name] for name in steps.files}
    arrays["l0_c1_index"][3, 1] = 61  # (one past the frames)
    with zipfile.ZipFile(os.path.join(path, "steps.npz"), "w") as archive:
        for name, array in arrays.items():
            with archive.open(f"{name}.npy", "w") as f:
                np.lib.format.write_array(f, array)
    with pytest.raises(Damaged, match="l0_c1_index names frames outside the 61 of l0_c1_frames"):
        NativeReplayServer([spec], checkpoint_dir=str(tmp_path), seed=0)
