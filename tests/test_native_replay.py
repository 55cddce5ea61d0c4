"""Runs on the native replay backend: reproducible when seeded, and free of TensorFlow.

Reverb's samplers take no seed; the native backend's are seeded from the run's seed, and the
one-process runner grants the learner each batch at the same point of the run, so a seeded
one-process run of every agent is the same run twice (on one machine). A native run, in one
process or distributed, never imports TensorFlow (nor Reverb).
"""

from __future__ import annotations

import csv
import json
import os
import textwrap
import threading

import pytest

from shoal.launch import run_experiment
from shoal.launch.experiments.config import experiment_config
from tests.shoal_cli import run_shoal
from tests.waiting import wait_for

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# agent -> (env, budget, settings): a few updates each, well past the first sampled batch
RUNS = {
    "dqn": ("CartPole-v1", 3000, {"min_replay_size": 500}),
    "dqn-prioritized": ("CartPole-v1", 3000, {"min_replay_size": 500, "prioritized_replay": True}),
    "ppo": ("CartPole-v1", 3000, {}),
    "impala": ("CartPole-v1", 3000, {}),
    "sac": ("Pendulum-v1", 1500, {"min_replay_size": 400}),
    "r2d2": ("CartPole-v1", 3000, {}),
    "qrdqn_agent:QRDQNBuilder": ("CartPole-v1", 3000, {}),
}


def trained(agent: str, tmp_path, name: str) -> tuple[dict, list]:
    env, budget, settings = RUNS[agent]
    config = experiment_config(
        agent.split("-")[0],
        env,
        preset=None,
        agent_settings=settings,
        seed=3,
        max_env_steps=budget,
        num_envs=4,
        eval_every=budget // 2,
        eval_episodes=2,
        target_return=1e9,
        run_dir=str(tmp_path / name),
        progress=False,
        replay="native",
    )
    result = run_experiment(config)
    with open(tmp_path / name / "eval.csv") as f:
        rows = [{k: v for k, v in row.items() if "time" not in k and not k.endswith("_s")} for row in csv.DictReader(f)]
    return result, rows


@pytest.mark.e2e
@pytest.mark.parametrize("agent", list(RUNS))
def test_a_seeded_one_process_run_is_the_same_run_twice(agent, tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(os.path.join(ROOT, "examples"))
    first, first_evals = trained(agent, tmp_path, "first")
    second, second_evals = trained(agent, tmp_path, "second")
    assert first["learner_steps"] > 0
    for key in ("env_steps", "learner_steps", "final_eval_return", "num_evals"):
        assert first[key] == second[key], key
    assert first_evals == second_evals


FAKE = """
import os, traceback
with open(os.environ["SHOAL_TEST_FORBIDDEN"], "a") as f:
    f.write(f"{__name__} imported in pid {os.getpid()}:\\n" + "".join(traceback.format_stack()) + "\\n")
raise ImportError(f"{__name__} is forbidden on the native path (test_native_replay)")
"""


@pytest.mark.e2e
@pytest.mark.parametrize("launcher", [None, "processes"])
def test_a_native_run_never_imports_tensorflow_or_reverb(launcher, tmp_path):
    blocked = tmp_path / "blocked"
    for name in ("tensorflow", "reverb"):
        (blocked / name).mkdir(parents=True)
        (blocked / name / "__init__.py").write_text(textwrap.dedent(FAKE))
    marker = tmp_path / "imported.txt"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(blocked), ROOT, os.environ.get("PYTHONPATH", "")]),
        "SHOAL_TEST_FORBIDDEN": str(marker),
    }
    args = [
        "train",
        "--agent",
        "dqn",
        "--env",
        "CartPole-v1",
        "--replay",
        "native",
        "--max-env-steps",
        "3000",
        "--eval-every",
        "1500",
        "--target-return",
        "1e9",
        "--quiet",
        "--run-dir",
        str(tmp_path / "run"),
    ]
    if launcher:
        args += ["--launcher", launcher, "--num-actors", "2"]
    done = run_shoal(*args, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1])["learner_steps"] > 0
    assert not marker.exists(), marker.read_text()[:3000]


def _served(tables):
    """A native server behind Shoal's RPC layer (as a distributed run's replay node serves it)
    and a client of it over the socket."""
    from shoal.launch.programs.rpc import RpcClient, RpcServer
    from shoal.replay.native import SERVICE_METHODS, NativeReplayClient, NativeReplayServer

    replay = NativeReplayServer(tables)
    rpc = RpcServer(replay, token="t0ken", methods=SERVICE_METHODS).start()
    return replay, rpc, NativeReplayClient(RpcClient(rpc.address, token="t0ken", timeout_s=30), rpc.address)


def _queue(length_signature=()):
    import numpy as np

    from shoal.core.specs import ArraySpec
    from shoal.replay import make_queue_table

    return make_queue_table("q", {"x": ArraySpec((*length_signature, 2), np.float32)}, capacity=100)


def test_overlapping_items_share_their_steps_over_rpc():
    import numpy as np

    replay, rpc, client = _served([_queue((4,))])
    try:
        writer = client.writer(4)
        for t in range(10):  # items of 4 steps every 2 steps: steps 0-3, 2-5, 4-7, 6-9
            writer.append([np.full(2, t, np.float32)])
            if t >= 3 and (t - 3) % 2 == 0:
                writer.create_item("q", 1.0, 4)
                writer.commit()
        writer.flush()
        assert client.server_info()["q"].current_size == 4
        assert len(replay._store) == 10  # each step once, however many items use it
        items = [s.data[0][:, 0].tolist() for s in client.sample("q", num_samples=4)]
        assert items == [[0, 1, 2, 3], [2, 3, 4, 5], [4, 5, 6, 7], [6, 7, 8, 9]]
        writer.close()
        assert len(replay._store) == 0  # (sampled once from a queue: gone, and the writer let go)
    finally:
        rpc.stop()
        replay.stop()


def test_a_replay_server_that_goes_away_mid_run_is_one_clear_error_not_a_hang():
    import numpy as np

    from shoal.replay.native import ReplayServerGone

    replay, rpc, client = _served([_queue()])
    writer = client.writer(1, timeout_s=30)
    writer.append([np.zeros(2, np.float32)])
    writer.create_item("q", 1.0, 1)
    writer.flush()
    rpc.stop()
    replay.stop()
    writer.append([np.ones(2, np.float32)])
    writer.create_item("q", 1.0, 1)
    with pytest.raises(ReplayServerGone, match="went away") as raised:
        writer.flush()
    assert "\n" not in str(raised.value)
    writer.close()  # (nothing more to say: no second error)


def test_a_writer_held_back_when_its_server_stops_closes_without_an_error():
    """An actor stopping at a program's end: its items wait on a full table while the replay
    node stops. Closing its writer is no error (the server's ``ReplayClosed`` over RPC), and a
    bounded close returns once its time is up, even with a call in flight."""
    import numpy as np

    from shoal.core.specs import ArraySpec
    from shoal.replay import make_queue_table

    replay, rpc, client = _served([make_queue_table("q", {"x": ArraySpec((2,), np.float32)}, capacity=1)])
    try:
        blocked, bounded = client.writer(1, timeout_s=30), client.writer(1, timeout_s=30)
        for writer, wait_for in ((blocked, 0), (bounded, 1), (blocked, 1)):  # (the first item fills the queue)
            writer.append([np.zeros(2, np.float32)])
            writer.create_item("q", 1.0, 1)
            writer.flush(block_until_num_items=wait_for)  # (the first confirmed; the others sent, held back)
        assert bounded.close(timeout_s=0.3) is False  # (its call is in flight: given up on)
        errors: list[BaseException] = []

        def close() -> None:
            try:
                blocked.close()
            except BaseException as e:  # noqa: BLE001 -- the test's to see
                errors.append(e)

        closing = threading.Thread(target=close)
        closing.start()
        closing.join(0.2)  # (the close waits on the full queue; or, if not yet, meets a stopped server)
        replay.stop()
        closing.join(10)
        assert not closing.is_alive() and errors == []
    finally:
        rpc.stop()
        replay.stop()


def test_a_checkpoint_keeps_the_steps_of_items_removed_while_it_is_written(tmp_path, monkeypatch):
    """A distributed run checkpoints while actors insert: an item the checkpoint copied may be
    removed (FIFO at ``max_size``) before its steps are read. (A processes run failed its last
    checkpoint with ``KeyError`` on such a step.)"""
    import numpy as np

    from shoal.core.specs import ArraySpec
    from shoal.replay import RateLimit, TableSpec
    from shoal.replay.native import NativeReplayServer

    table = TableSpec(
        "t",
        sampler="uniform",
        remover="fifo",
        max_size=2,
        rate_limit=RateLimit(1.0, 1, -1e9, 1e9),
        signature={"x": ArraySpec((2,), np.float32)},
    )
    replay = NativeReplayServer([table], checkpoint_dir=str(tmp_path))

    def insert(values):
        writer = replay.client.writer(1)
        for v in values:
            writer.append([np.full(2, v, np.float32)])
            writer.create_item("t", 1.0, 1)
        writer.close()

    insert([1, 2])
    write = NativeReplayServer._write_checkpoint

    def evicting_first(self, states):  # (the actors' inserts land between the copy and the write)
        insert([3, 4])
        assert replay.server_info()["t"]["current_size"] == 2
        return write(self, states)

    monkeypatch.setattr(NativeReplayServer, "_write_checkpoint", evicting_first)
    replay.checkpoint()
    assert len(replay._store) == 2  # (the checkpoint let go of the removed items' steps)
    monkeypatch.undo()
    restored = NativeReplayServer([table], checkpoint_dir=str(tmp_path))
    got = sorted(float(s.data[0][0]) for s in restored.client.sample("t", num_samples=20))
    assert set(got) == {1.0, 2.0}, got


def _segments_of_this_process() -> list[str]:
    return [name for name in os.listdir("/dev/shm") if name.startswith(f"shoal-replay-{os.getpid()}-")]


def _served_shared(tables, shared_memory=True):
    from shoal.launch.programs.rpc import RpcClient
    from shoal.replay.native import NativeReplayClient

    replay, rpc, _ = _served(tables)
    client = NativeReplayClient(
        RpcClient(rpc.address, token="t0ken", timeout_s=30), rpc.address, shared_memory=shared_memory
    )
    return replay, rpc, client


@pytest.mark.parametrize("shared_memory", [True, False], ids=["shared-memory", "rpc"])
def test_large_steps_and_batches_cross_shared_memory_on_one_host_intact(shared_memory):
    """Same host: a writer's steps and a dataset's batches travel through a segment (no file
    left in /dev/shm once attached; unmapped by the server when the client is done); the data is
    what was written, as it is over RPC alone."""
    import numpy as np

    from shoal.core.specs import ArraySpec
    from shoal.replay import RateLimit, TableSpec, transition_batches

    shape = (8, 4, 32, 32)  # (32 KiB a step column: a call of 8 items goes through shared memory)
    table = TableSpec(
        "t",
        sampler="fifo",
        remover="fifo",
        max_size=1000,
        rate_limit=RateLimit(1.0, 1, -1e9, 1e9),
        max_times_sampled=1,
        signature={"observation": ArraySpec(shape, np.uint8), "reward": ArraySpec((8,), np.float32)},
    )
    replay, rpc, client = _served_shared([table], shared_memory)
    try:
        writer = client.writer(1)
        for t in range(64):
            writer.append([np.full(shape, t, np.uint8), np.full(8, t / 2, np.float32)])
            writer.create_item("t", 1.0, 1)
            writer.commit()
        writer.flush()
        assert (writer._segment is not None) == shared_memory
        assert _segments_of_this_process() == []  # (unlinked once the server mapped it)
        assert len(replay._segments) == int(shared_memory)
        dataset = transition_batches(client, "t", num_envs=8, batch_size=16 * 8)
        got = [next(dataset) for _ in range(4)]
        assert bool(dataset._sampler._segment) == shared_memory  # (the native sampler's)
        observations = np.concatenate([b.data["observation"][:, 0] for b in got])  # [4 * 128, 4, 32, 32]
        steps = np.repeat(np.arange(64), 8)  # (a FIFO, each item once: the steps in order, 8 envs each)
        np.testing.assert_array_equal(observations, np.broadcast_to(steps[:, None, None, None], observations.shape))
        np.testing.assert_array_equal(np.concatenate([b.data["reward"][:, 0] for b in got]), steps / 2)
        writer.close()
        dataset.close()
        with pytest.raises(StopIteration):
            next(dataset)
        assert replay._segments == {}  # (both let go of theirs)
    finally:
        rpc.stop()
        replay.stop()


@pytest.mark.parametrize("shared_memory", [True, False], ids=["shared-memory", "rpc"])
def test_steps_of_two_layouts_and_overlapping_items_in_one_call_arrive_intact(shared_memory):
    """A call's steps travel stacked, a column per run of steps of one layout: one writer whose
    steps alternate between two tables' layouts (and dtypes), with overlapping 3-step items for
    one and 1-step items for the other, all gathered into large calls, leaves every item with
    exactly the data written."""
    import numpy as np

    from shoal.core.specs import ArraySpec
    from shoal.replay import RateLimit, TableSpec

    limit = RateLimit(1.0, 1, -1e9, 1e9)
    wide = TableSpec(
        "wide",
        sampler="fifo",
        remover="fifo",
        max_size=1000,
        rate_limit=limit,
        max_times_sampled=1,
        signature={"frame": ArraySpec((3, 64, 64), np.float32), "time": ArraySpec((3,), np.int64)},
    )
    small = TableSpec(
        "small",
        sampler="fifo",
        remover="fifo",
        max_size=1000,
        rate_limit=limit,
        max_times_sampled=1,
        signature={"frame": ArraySpec((2,), np.uint8), "time": ArraySpec((), np.int32)},
    )
    replay, rpc, client = _served_shared([wide, small], shared_memory)
    try:
        writer = client.writer(8)
        wides, smalls = [], []  # (steps in runs of 4 of each layout: a call stacks runs of several)
        for t in range(160):
            if t // 4 % 2 == 0:
                writer.append([np.full((64, 64), t, np.float32), np.int64(t)])
                wides.append(t)
                if len(wides) >= 3:  # (the last three wide steps: each overlaps the item before by two)
                    writer.create_item("wide", 1.0, wides[-3:])
            else:
                writer.append([np.full(2, t, np.uint8), np.int32(t)])
                smalls.append(t)
                writer.create_item("small", 1.0, 1)
            writer.commit()
            if t % 16 == 15:
                writer.flush(block_until_num_items=8)
        writer.flush()
        assert (writer._segment is not None) == shared_memory
        taken = list(client.sample("wide", num_samples=len(wides) - 2))
        assert [s.data[1].tolist() for s in taken] == [wides[i - 2 : i + 1] for i in range(2, len(wides))]
        for s in taken:
            np.testing.assert_array_equal(s.data[0], np.broadcast_to(s.data[1][:, None, None], (3, 64, 64)))
        taken = list(client.sample("small", num_samples=len(smalls)))
        assert [int(s.data[1]) for s in taken] == smalls
        assert all(s.data[0].tolist() == [int(s.data[1])] * 2 and s.data[0].dtype == np.uint8 for s in taken)
        writer.close()
    finally:
        rpc.stop()
        replay.stop()


@pytest.mark.parametrize("where", ["in-process", "rpc"])
def test_items_of_one_envs_steps_interleaved_with_other_envs_are_gathered_intact(where):
    """A sequence adder appends each env's step in turn and makes an item of one env's last
    steps (rows ``num_envs`` apart in what a call stored); an item may also skip steps: each
    item samples as exactly its steps."""
    import numpy as np

    from shoal.core.specs import ArraySpec
    from shoal.replay import RateLimit, TableSpec
    from shoal.replay.native import NativeReplayServer

    table = TableSpec(
        "s",
        sampler="fifo",
        remover="fifo",
        max_size=1000,
        rate_limit=RateLimit(1.0, 1, -1e9, 1e9),
        max_times_sampled=1,
        signature={"x": ArraySpec((4, 2), np.float32)},
    )
    if where == "in-process":
        replay = NativeReplayServer([table])
        client, rpc = replay.client, None
    else:
        replay, rpc, client = _served([table])
    try:
        writer = client.writer(3 * 6)
        refs: list[list[int]] = [[], [], []]
        expected = []
        for t in range(40):
            for env in range(3):
                refs[env].append(writer.append([np.full(2, 100 * env + t, np.float32)]))
            if t >= 5 and t % 2 == 1:  # (every other step, an item of each env's last 4 steps ...
                for env in range(3):
                    writer.create_item("s", 1.0, refs[env][-4:])
                    expected.append([100 * env + u for u in range(t - 3, t + 1)])
                # (... and one of unevenly spaced steps)
                writer.create_item("s", 1.0, [refs[1][-6], refs[1][-5], refs[1][-3], refs[1][-1]])
                expected.append([100 + t - 5, 100 + t - 4, 100 + t - 2, 100 + t])
            writer.commit()
        writer.flush()
        got = [s.data[0][:, 0].tolist() for s in client.sample("s", num_samples=len(expected))]
        assert got == expected
        writer.close()
    finally:
        if rpc is not None:
            rpc.stop()
        replay.stop()


def test_a_queue_grown_past_its_first_slots_drains_and_fills_again():
    """A table's slot arrays start at ``MIN_SLOTS`` and double as items come; a queue holding
    more than that, then drained by its sampler (each item removed as it is taken), gives every
    slot back (once found: the free-slot stack was shorter than the grown table, and the drain
    failed with an IndexError past the first ``MIN_SLOTS`` removals), and fills and drains again
    in order."""
    import numpy as np

    from shoal.core.specs import ArraySpec
    from shoal.replay import RateLimit, TableSpec
    from shoal.replay.native import NativeReplayServer
    from shoal.replay.native.table import MIN_SLOTS

    count = 3 * MIN_SLOTS + 5
    table = TableSpec(
        "q",
        sampler="fifo",
        remover="fifo",
        max_size=4 * MIN_SLOTS,
        rate_limit=RateLimit(1.0, 1, -1e9, 1e9),
        max_times_sampled=1,
        signature={"x": ArraySpec((), np.int64)},
    )
    replay = NativeReplayServer([table])
    try:
        for round_ in range(2):
            values = np.arange(count) + round_ * count
            for start in range(0, count, 1000):  # (runs of items: the table grows while it holds some)
                run = values[start : start + 1000]
                assert replay.insert_items([["q", np.ones(len(run)), [run]]], 1.0) == len(run)
            got = []
            while len(got) < count:
                got.extend(replay.sample("q", 1000, 1.0)["columns"][0].tolist())
            assert got == values.tolist()
            assert replay.server_info()["q"]["current_size"] == 0
    finally:
        replay.stop()


def test_a_server_that_lost_a_writers_segment_takes_its_steps_over_rpc():
    """A replay node started again maps no segment of the writer's: the writer sends the same
    steps over RPC, and from then on."""
    import numpy as np

    replay, rpc, client = _served_shared([_queue((8, 4096))])
    try:
        writer = client.writer(1)
        for t in range(8):
            writer.append([np.full((8, 4096, 2), t, np.float32)])
            writer.create_item("q", 1.0, 1)
            writer.commit()
        writer.flush()
        replay.detach_shared(writer._segment.name)  # (what a new server knows of it)
        for t in range(8, 16):
            writer.append([np.full((8, 4096, 2), t, np.float32)])
            writer.create_item("q", 1.0, 1)
            writer.commit()
        writer.flush()
        assert writer._no_segment
        values = [float(s.data[0][0, 0, 0]) for s in client.sample("q", num_samples=16)]
        assert values == list(range(16))
        writer.close()
    finally:
        rpc.stop()
        replay.stop()


def test_a_server_maps_only_this_users_segments_of_the_size_said_and_reads_only_inside_them(tmp_path):
    import numpy as np

    from shoal.core.shared_memory import Attached, Segment

    segment = Segment(4096, directory=str(tmp_path))
    try:
        for bad in ("../etc/passwd", "shoal-params-1-2", f"{segment.name}/x"):
            with pytest.raises(ValueError, match="not a native replay segment"):
                Attached(bad, 4096, directory=str(tmp_path))
        with pytest.raises(ValueError, match="not a 8192-byte segment"):
            Attached(segment.name, 8192, directory=str(tmp_path))
        os.symlink(os.path.join(str(tmp_path), segment.name), os.path.join(str(tmp_path), "shoal-replay-1-1"))
        with pytest.raises(OSError):  # (a link is not followed)
            Attached("shoal-replay-1-1", 4096, directory=str(tmp_path))
        with pytest.raises(FileNotFoundError):  # (another host's segment: the client keeps to RPC)
            Attached("shoal-replay-1-2", 4096, directory=str(tmp_path))
        attached = Attached(segment.name, 4096, directory=str(tmp_path))
        places = segment.put([np.arange(10, dtype=np.int64)])
        np.testing.assert_array_equal(attached.copies(places)[0], np.arange(10))
        for outside in (["<i8", [1000], 0], ["<i8", [10], 4096], ["<i8", [10], -64], ["|O", [1], 0]):
            with pytest.raises(ValueError):
                attached.copies([outside])
        assert segment.put([np.zeros(4097, np.uint8)]) is None  # (too large: over RPC instead)
        assert segment.put([np.array(["text"], dtype=object)]) is None
        attached.close()
    finally:
        segment.close()


def test_items_gathered_behind_a_call_go_in_once_a_writer_that_stopped_sends_what_is_pending():
    """Over RPC, items committed while a call is in flight gather for the next commit. A writer
    that stops committing (an actor paced until the learner's first update) sends them with
    ``send_pending`` once that call is answered; without it they would wait for a step that does
    not come while the learner waits on them (a distributed run that hung under load)."""
    import numpy as np

    from shoal.core.specs import ArraySpec
    from shoal.replay import make_queue_table
    from shoal.replay.native.client import RPC_BATCH

    replay, rpc, client = _served([make_queue_table("q", {"x": ArraySpec((2,), np.float32)}, capacity=RPC_BATCH // 2)])
    inserted = lambda: client.server_info()["q"].rate_limiter_info.insert_stats.completed  # noqa: E731
    try:
        writer = client.writer(1, timeout_s=30)
        for t in range(2 * RPC_BATCH):  # the first batch's call is held by the full queue; the second gathers
            writer.append([np.full(2, t, np.float32)])
            writer.create_item("q", 1.0, 1)
            writer.commit()
        writer.send_pending()  # (the call in flight is not answered: nothing is sent)
        taken = [int(s.data[0][0]) for s in client.sample("q", num_samples=RPC_BATCH)]  # (the first call's)
        assert taken == list(range(RPC_BATCH)) and inserted() == RPC_BATCH
        wait_for(
            lambda: writer.send_pending() or inserted() >= RPC_BATCH + RPC_BATCH // 2,
            30,
            "the gathered items in the table (as many as the queue holds)",
        )
        taken = [int(s.data[0][0]) for s in client.sample("q", num_samples=RPC_BATCH)]
        assert taken == list(range(RPC_BATCH, 2 * RPC_BATCH))
        writer.close()
    finally:
        rpc.stop()
        replay.stop()


def test_an_adders_bounded_flushes_lose_no_item_over_rpc():
    """``flush(k)`` (the n-step adder's, every 8 items) lets items wait for the next call while
    one is in flight; a full ``flush()`` then leaves every item in the table, in order."""
    import numpy as np

    from shoal.replay import RateLimit

    table = _queue().replace(max_size=1000, rate_limit=RateLimit(1.0, 1, 0.0, 1000.0))
    replay, rpc, client = _served([table])
    try:
        writer = client.writer(1)
        for t in range(200):
            writer.append([np.full(2, t, np.float32)])
            writer.create_item("q", 1.0, 1)
            writer.commit()
            if (t + 1) % 8 == 0:
                writer.flush(block_until_num_items=8)
        writer.flush()
        assert [int(s.data[0][0]) for s in client.sample("q", num_samples=200)] == list(range(200))
        writer.close()
    finally:
        rpc.stop()
        replay.stop()
