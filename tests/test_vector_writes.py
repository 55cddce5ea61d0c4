"""A whole vector step in one writer call (``ReplayWriter.append_item``, ``append_rows``): the same
items as the step-by-step calls, on both backends, and the native writer's rate-limited path; over
RPC (a native replay server in another process), the adders' items as in one process, the rate
limiter's hold-back and a bad item refused whole."""

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
    """The next ``count`` items of ``table`` (a FIFO queue) of ``server`` (or of a client), flat."""
    # (poll_s: how long a stream waits for an item before it ends, and so how long the closing of
    # one that prefetches past the last item waits; a stream that ends empty is opened again)
    client = getattr(server, "client", server)
    sampler = client.sampler(table, count, timeout_s=30.0, poll_s=0.25, each_item_once=True)
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


# -- over RPC: a replay server in another process ------------------------------------------------
SERVE = """
import sys
import numpy as np
from shoal.launch.programs.rpc import RpcServer
from shoal.replay.native import SERVICE_METHODS, NativeReplayServer
from tests.test_vector_writes import _rpc_tables
replay = NativeReplayServer(_rpc_tables())
rpc = RpcServer(replay, token="t0ken", methods=SERVICE_METHODS).start()
print(rpc.port, flush=True)
sys.stdin.read()  # (serves until the test closes its stdin)
"""
RPC_ENVS, RPC_LENGTH, RPC_PERIOD = 4, 4, 2
OBS_SIZES = {"small": 3, "large": 2048}  # (large: a call's arrays >= 64 KB: through shared memory on this host)


def _rpc_spec(obs_size: int):
    single = gym.spaces.Box(-1e3, 1e3, (obs_size,), np.float32)
    return make_environment_spec(
        SimpleNamespace(observation_space=single, action_space=gym.spaces.Discrete(2)), RPC_ENVS
    )


def _rpc_tables() -> list[TableSpec]:
    """The tables of the RPC tests, in the server's process and in this one: per observation size
    an n-step table (``nstep-<size>``), an env-sequence one (``seq-<size>``), and ``limited``
    (two inserts ahead of the samples at most)."""
    from shoal.replay.signatures import transition_signature

    tables = [_fifo("limited", rate_limit=RateLimit(1.0, 1, -1e9, 2.0))]
    for name, size in OBS_SIZES.items():
        spec = _rpc_spec(size)
        tables.append(_fifo(f"nstep-{name}", signature=transition_signature(spec, {})))
        tables.append(_fifo(f"seq-{name}", signature=env_sequence_signature(spec, {}, RPC_LENGTH)))
    return tables


@pytest.fixture(scope="module")
def replay_process():
    """A native replay server in a process of its own, served by Shoal's RPC layer (as a
    distributed run's replay node), and a client of it (shared memory on: this host)."""
    import os
    import subprocess
    import sys

    from shoal.launch.programs.rpc import RpcClient
    from shoal.replay.native import NativeReplayClient

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVE], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=root
    )
    try:
        port = proc.stdout.readline().strip()
        assert port, "the replay server process printed no port (it failed to start)"
        address = f"127.0.0.1:{port}"
        rpc = RpcClient(address, token="t0ken", timeout_s=30).wait_for_ready(30)
        yield NativeReplayClient(rpc, address, shared_memory=True)
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def _rpc_steps(obs_size: int, count: int) -> list[Step]:
    """Vector steps of ``RPC_ENVS`` envs with episode ends, each value telling where it came from."""
    rng = np.random.default_rng(0)
    steps = []
    for _ in range(count):
        obs = rng.standard_normal((RPC_ENVS, obs_size)).astype(np.float32)
        ends = rng.random(RPC_ENVS)
        steps.append(
            Step(
                obs,
                rng.integers(0, 2, RPC_ENVS).astype(np.int32),
                rng.standard_normal(RPC_ENVS).astype(np.float32),
                ends < 0.1,
                ends > 0.9,
                obs + 1,
                {},
            )
        )
    return steps


@pytest.mark.e2e  # (a replay server in a second process)
@pytest.mark.parametrize("size", list(OBS_SIZES))
def test_the_adders_items_through_a_replay_server_process_are_those_of_one_process(replay_process, size, monkeypatch):
    """DQN's n-step adder (``append_item``: columnar ``insert_items`` messages) and R2D2's
    env-sequence adder (``append_rows``: blocks sent as they are) write the very items, in the
    same order, through a server in another process as into one in this process."""
    from shoal.replay import NStepTransitionAdder

    calls = []
    call_later = replay_process._call_later
    monkeypatch.setattr(
        replay_process, "_call_later", lambda method, *a: calls.append(method) or call_later(method, *a)
    )

    spec, steps = _rpc_spec(OBS_SIZES[size]), _rpc_steps(OBS_SIZES[size], 40)
    local = make_replay_server(_rpc_tables(), "native")
    try:
        for client in (local.client, replay_process):
            nstep = NStepTransitionAdder(client, f"nstep-{size}", spec, n_step=3, discount=0.9, max_in_flight_items=8)
            seq = EnvSequenceAdder(client, f"seq-{size}", spec, RPC_LENGTH, RPC_PERIOD)
            for step in steps:
                nstep.add(step)
                seq.add(step)
            assert nstep.close() and seq.close()
        shared = "_shared" if size == "large" else ""  # (the large calls went through shared memory)
        assert {f"insert_items{shared}", f"insert{shared}"} <= set(calls), calls
        # 38 n-step items (one per vector step from the third); 19 windows x 4 envs of sequences
        for table, count in ((f"nstep-{size}", 38), (f"seq-{size}", 19 * RPC_ENVS)):
            here, there = _drain(local, table, count), _drain(replay_process, table, count)
            assert len(here) == len(there)
            for want, got in zip(here, there):
                assert want.dtype == got.dtype and np.array_equal(want, got), table
    finally:
        local.stop()


@pytest.mark.e2e  # (a replay server in a second process)
def test_append_item_over_rpc_keeps_the_rate_limiter_s_hold_back_and_refuses_a_bad_item_whole(replay_process):
    """Over RPC, items the rate limiter holds back past the timeout raise ``TimeoutError`` (at the
    flush that waits for them) and go in with a later one, in order, nothing lost or doubled; a
    message with an item of the wrong dtype is refused in one line, the table untouched."""
    from shoal.launch.programs.rpc import RemoteError

    writer = replay_process.writer(1, 0.2)
    for i in range(3):
        writer.append_item("limited", 1.0, [np.full(3, i, np.float32), np.int32(i)])
    with pytest.raises(TimeoutError, match="replay table 'limited' did not take an item"):
        writer.flush()
    assert replay_process.server_info()["limited"].current_size == 2
    assert _drain(replay_process, "limited", 2)[1].tolist() == [0, 1]
    writer.flush()
    assert _drain(replay_process, "limited", 1)[1].tolist() == [2]
    writer.append_item("limited", 1.0, [np.full(3, 3, np.float64), np.int32(3)])  # (float64: not the signature's)
    with pytest.raises(
        RemoteError, match="column 0 .* is float64\\[3\\]; its signature says float32\\[3\\]"
    ) as refused:
        writer.flush()
    assert "\n" not in str(refused.value)
    assert replay_process.server_info()["limited"].current_size == 0
    writer.append_item("limited", 1.0, [np.full(3, 4, np.float32), np.int32(4)])
    writer.flush()
    assert _drain(replay_process, "limited", 1)[1].tolist() == [4]
    assert writer.close()


def _held(server) -> list[np.ndarray]:
    """Table ``t``'s items, oldest first: their insert serials, priorities and columns."""
    table = server._tables["t"]
    live = np.flatnonzero(table._key)
    order = live[np.argsort(table._serial[live])]
    columns = server._store.gather_rows(table._lane[order], table._rows[order, :1])
    return [table._serial[order], table._priority[order], *columns]


@pytest.mark.parametrize("sampler", ["uniform", "prioritized"])
def test_a_columnar_message_goes_into_the_table_as_its_items_one_at_a_time_would(sampler):
    """``insert_items`` (what the RPC writer's message becomes on the server: a run of items in
    one call) leaves the table as ``append_item``'s one-at-a-time inserts leave it: the same
    items in the same order, the oldest removed from a full table, the same counts, and the rate
    limiter letting in exactly as many."""
    from shoal.replay.native import NativeReplayServer

    def spec(max_diff: float) -> TableSpec:
        return TableSpec(
            "t", sampler, "fifo", 5, RateLimit(1.0, 1, -1e9, max_diff), priority_exponent=0.5, signature=SIGNATURE
        )

    items = [[np.full(3, i, np.float32), np.int32(i)] for i in range(12)]
    priorities = np.arange(1.0, 13.0)
    for max_diff in (1e9, 7.0):  # (no limit; then seven inserts ahead of the samples at most)
        one, run = NativeReplayServer([spec(max_diff)], seed=0), NativeReplayServer([spec(max_diff)], seed=0)
        writer = one.client.writer(1, 0.0)
        taken = 0
        for columns, priority in zip(items, priorities):
            try:
                writer.append_item("t", priority, columns)
                taken += 1
            except TimeoutError:
                break
        message = [["t", priorities, [np.stack([c[k] for c in items]) for k in range(2)]]]
        assert run.insert_items(message, 0.0) == taken == min(12, 7 if max_diff < 1e9 else 12)
        for server in (one, run):
            info = server.server_info()["t"]
            assert (info["current_size"], info["inserts"], info["deletes"]) == (5, taken, taken - 5)
        held = [_held(server) for server in (one, run)]
        assert held[0][0].tolist() == held[1][0].tolist() == list(range(taken - 4, taken + 1))  # (the newest 5)
        for want, got in zip(*held):
            assert want.dtype == got.dtype and np.array_equal(want, got)
        for sampled in run.client.sample("t", 20):  # (each key names its own item's data and priority)
            assert sampled.info.priority == sampled.data[1] + 1 and (sampled.data[0] == sampled.data[1]).all()
        one.stop()
        run.stop()
