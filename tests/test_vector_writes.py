"""A whole vector step in one writer call (``ReplayWriter.append_item``, ``append_rows``): the same
items as the step-by-step calls, on both backends, and the native writer's rate-limited path."""

from __future__ import annotations

import time
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
import tree

from shoal.core.specs import ArraySpec, make_environment_spec
from shoal.core.types import Step
from shoal.replay import EnvSequenceAdder, make_replay_server
from shoal.replay.backends import reverb_installed
from shoal.replay.signatures import env_sequence_signature
from shoal.replay.tables import RateLimit, TableSpec

BACKENDS = ["native"] + (["reverb"] if reverb_installed() else [])
SIGNATURE = {"a": ArraySpec((3,), np.float32), "b": ArraySpec((), np.int32)}


def _fifo(name: str, max_size: int = 100, rate_limit: RateLimit | None = None, signature=SIGNATURE) -> TableSpec:
    return TableSpec(
        name,
        sampler="fifo",
        remover="fifo",
        max_size=max_size,
        rate_limit=rate_limit or RateLimit(1.0, 1, -1e9, 1e9),
        max_times_sampled=1,
        signature=signature,
    )


def _drain(server, table: str, count: int) -> list:
    # (poll_s: how long a stream waits for an item before it ends, and so how long the closing of
    # one that prefetches past the last item waits; a stream that ends empty is opened again)
    sampler = server.client.sampler(table, count, timeout_s=30.0, poll_s=0.25, each_item_once=True)
    try:
        deadline, got = time.monotonic() + 30.0, None
        while got is None and time.monotonic() < deadline:
            got = sampler.sample(count)
        assert got is not None and len(got.info.key) == count
        return tree.flatten(got.data)
    finally:
        sampler.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_append_item_writes_the_items_append_create_item_and_commit_write(backend):
    server = make_replay_server([_fifo("old"), _fifo("new")], backend)
    try:
        rng = np.random.default_rng(0)
        steps = [[rng.random(3).astype(np.float32), np.int32(i)] for i in range(6)]
        old, new = server.client.writer(1, 30.0), server.client.writer(1, 30.0)
        for columns in steps:
            old.append(columns)
            old.create_item("old", 1.0, 1)
            old.commit()
            new.append_item("new", 1.0, columns)
        old.flush()
        new.flush()
        for want, got in zip(_drain(server, "old", 6), _drain(server, "new", 6)):
            assert want.dtype == got.dtype and np.array_equal(want, got)
        assert old.close() and new.close()
    finally:
        server.stop()


@pytest.mark.parametrize("backend", BACKENDS)
def test_append_rows_keeps_each_row_as_a_step(backend):
    """Rows appended in one call make the items rows appended one by one make."""
    server = make_replay_server([_fifo("old"), _fifo("new")], backend)
    try:
        block = [np.arange(12, dtype=np.float32).reshape(4, 3), np.arange(4, dtype=np.int32)]
        old, new = server.client.writer(4, 30.0), server.client.writer(4, 30.0)
        for row in zip(*block):
            old.append(list(row))
        kept = new.append_rows(block)
        if new.shares_steps:
            assert list(kept) == [0, 1, 2, 3]
        for writer, table in ((old, "old"), (new, "new")):
            writer.create_item(table, 1.0, 1)  # (the last row)
            writer.commit()
            writer.flush()
        block[0][:] = -1  # (the writer kept its own copy)
        a, b = _drain(server, "new", 1)
        np.testing.assert_array_equal(a, [[9.0, 10.0, 11.0]])
        np.testing.assert_array_equal(b, [3])
        assert all(np.array_equal(x, y) for x, y in zip(_drain(server, "old", 1), [a, b]))
    finally:
        server.stop()


def test_native_append_item_held_back_by_the_rate_limiter_stays_pending():
    """An item the rate limiter holds back past the timeout raises ``TimeoutError`` and goes in
    with a later flush, once the limiter lets it; nothing is lost or doubled."""
    limit = RateLimit(1.0, 1, -1e9, 2.0)  # (two inserts ahead of the samples at most)
    server = make_replay_server([_fifo("t", rate_limit=limit)], "native")
    try:
        writer = server.client.writer(1, 0.05)
        writer.append_item("t", 1.0, [np.ones(3, np.float32), np.int32(0)])
        writer.append_item("t", 1.0, [np.ones(3, np.float32), np.int32(1)])
        with pytest.raises(TimeoutError, match="did not take an item"):
            writer.append_item("t", 1.0, [np.ones(3, np.float32), np.int32(2)])
        assert server.client.server_info()["t"].current_size == 2
        assert _drain(server, "t", 2)[1].tolist() == [0, 1]
        writer.flush()
        assert _drain(server, "t", 1)[1].tolist() == [2]
        writer.append_item("t", 1.0, [np.ones(3, np.float32), np.int32(3)])  # (and on, by the quick path)
        assert _drain(server, "t", 1)[1].tolist() == [3]
        assert writer.close()
    finally:
        server.stop()


@pytest.mark.parametrize("backend", BACKENDS)
def test_env_sequence_items_are_each_env_s_steps(backend):
    """The R2D2 adder's items (one per env, ``[length, ...]``, overlapping) hold each env's own
    consecutive steps, whichever writer path the backend takes."""
    num_envs, length, period = 3, 4, 2
    single = gym.spaces.Box(-1e3, 1e3, (2,), np.float32)
    spec = make_environment_spec(
        SimpleNamespace(observation_space=single, action_space=gym.spaces.Discrete(2)), num_envs
    )
    signature = env_sequence_signature(spec, {}, length)
    server = make_replay_server([_fifo("seq", signature=signature)], backend)
    try:
        adder = EnvSequenceAdder(server.client, "seq", spec, length, period)
        for t in range(8):
            obs = np.array([[t, env] for env in range(num_envs)], np.float32)
            adder.add(
                Step(
                    obs,
                    np.full(num_envs, t, np.int32),
                    np.arange(num_envs, dtype=np.float32) + 10 * t,
                    np.zeros(num_envs, bool),
                    np.zeros(num_envs, bool),
                    obs + 1,
                    {},
                )
            )
        adder.flush()
        # windows end at vector steps 3, 5, 7: 3 windows x 3 envs, in that order
        items = tree.unflatten_as(signature, _drain(server, "seq", 9))
        for i in range(9):
            window, env = divmod(i, num_envs)
            times = np.arange(2 * window, 2 * window + length)
            np.testing.assert_array_equal(items["observation"][i], np.stack([times, np.full(length, env)], -1))
            np.testing.assert_array_equal(items["action"][i], times)
            np.testing.assert_array_equal(items["reward"][i], env + 10 * times)
        adder.close()
    finally:
        server.stop()
