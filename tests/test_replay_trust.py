"""The native replay service checks every call, and a resume never trusts a replay checkpoint
(issue 54, items 1-4, 6 and 7).

* A real replay node (a ``NativeReplayServer`` served by Shoal's RPC layer with a token, as a
  distributed run's replay node serves it) refuses an authenticated insert that does not fit its
  table's signature (shapes, dtypes, finite numbers, item lengths, tables, steps), a NaN or
  negative priority (the rule ``mutate_priorities`` keeps), and a sample of more than
  ``MAX_SAMPLE_ITEMS`` items: one error to that caller, the table untouched, and the next
  correct call served.
* Under a local Ray (no ``--ray-address``) the replay node listens on loopback only (tests/test_ray.py).
* A resume refuses a replay checkpoint that ``run.json`` names but that is incomplete (no
  ``DONE``), and a damaged one (a truncated ``steps.npz``, an edited ``tables.json``), in one
  line naming the file, with nothing removed or written: in the one-process resume and the
  distributed one.
"""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest

from shoal.core.specs import ArraySpec
from shoal.launch.programs.rpc import RemoteError, RpcClient
from shoal.replay import RateLimit, TableSpec
from shoal.replay.native.validation import MAX_SAMPLE_ITEMS
from tests.test_native_replay import _served

ENVS = 4
LIMIT = RateLimit(1.0, 1, -1e9, 1e9)
# tree.flatten order (sorted keys), as the adders write a step's columns: action, observation, reward
STEP = {
    "action": ArraySpec((ENVS,), np.int32),
    "observation": ArraySpec((ENVS, 3), np.float32),
    "reward": ArraySpec((ENVS,), np.float32),
}
TABLES = [
    TableSpec("t", sampler="uniform", remover="fifo", max_size=100, rate_limit=LIMIT, signature=STEP),
    TableSpec(
        "seq",
        sampler="fifo",
        remover="fifo",
        max_size=100,
        rate_limit=LIMIT,
        signature={"x": ArraySpec((3, 2), np.float32)},
    ),
]


def step(action=None, observation=None, reward=None):
    """One step's columns, in the signature's order (each with one step on its leading axis)."""
    return [
        np.zeros((1, ENVS), np.int32) if action is None else action,
        np.ones((1, ENVS, 3), np.float32) if observation is None else observation,
        np.zeros((1, ENVS), np.float32) if reward is None else reward,
    ]


def items(tables, priorities, lengths, indices):
    return [list(tables), np.array(priorities, np.float64), np.array(lengths, np.int64), np.array(indices, np.int64)]


@pytest.fixture
def node():
    """A served replay node, the raw RPC client of a caller, and a writer id of its own."""
    replay, rpc, client = _served(TABLES)
    raw = RpcClient(rpc.address, token="t0ken", timeout_s=30)
    try:
        yield replay, raw, client
    finally:
        rpc.stop()
        replay.stop()


def sizes(client):
    return {name: info.current_size for name, info in client.server_info().items()}


def assert_refused(node, call, says):
    """``call(raw)`` fails with ``says`` in its one-line error; nothing of it was stored; then a
    correct insert of another writer goes in and is sampled."""
    replay, raw, client = node
    before, steps_before = sizes(client), len(replay._store)
    with pytest.raises(RemoteError) as raised:
        call(raw)
    message = str(raised.value)
    assert says in message and "\n" not in message, message
    assert sizes(client) == before and len(replay._store) == steps_before
    done = raw.insert("good", [[np.array([0]), step()]], items(["t"], [1.0], [1], [0]), np.array([0]), 5.0)
    assert done == 1 and sizes(client)["t"] == before["t"] + 1
    sampled = client.sample_batch("t", 1, 5.0)
    assert sampled["columns"][1].shape == (1, ENVS, 3) and np.isfinite(sampled["columns"][1]).all()


NAN_OBS = np.full((1, ENVS, 3), np.nan, np.float32)
INSERTS = {  # case -> (steps, items, what the error says)
    "wrong shape": (
        [[np.array([0]), step(observation=np.zeros((1, ENVS, 5), np.float32))]],
        items(["t"], [1.0], [1], [0]),
        "column 1 (observation) of its steps is float32[4, 5]; its signature says float32[4, 3]",
    ),
    "wrong dtype": (
        [[np.array([0]), step(action=np.zeros((1, ENVS), np.float64))]],
        items(["t"], [1.0], [1], [0]),
        "column 0 (action) of its steps is float64[4]; its signature says int32[4]",
    ),
    "missing column": (
        [[np.array([0]), step()[:2]]],
        items(["t"], [1.0], [1], [0]),
        "has steps of 2 columns; its signature has 3 (action, observation, reward)",
    ),
    "NaN observation": (
        [[np.array([0]), step(observation=NAN_OBS)]],
        items(["t"], [1.0], [1], [0]),
        "column 1 (float32) holds NaN or inf",
    ),
    "inf reward": (
        [[np.array([0]), step(reward=np.full((1, ENVS), np.inf, np.float32))]],
        items(["t"], [1.0], [1], [0]),
        "column 2 (float32) holds NaN or inf",
    ),
    "negative length": (
        [[np.array([0, 1]), [np.concatenate([c, c]) for c in step()]]],
        items(["t", "t"], [1.0, 1.0], [3, -1], [0, 1]),
        "an item's length must be >= 1 step, got -1",
    ),
    "zero length": (
        [[np.array([0]), step()]],
        items(["t", "t"], [1.0, 1.0], [1, 0], [0]),
        "an item's length must be >= 1 step, got 0",
    ),
    "length past the call": ([[np.array([0]), step()]], items(["t"], [1.0], [3], [0]), "does not add up"),
    "unknown table": (
        [[np.array([0]), step()]],
        items(["t", "nope"], [1.0, 1.0], [1, 1], [0, 0]),
        "replay table 'nope' is not served here",
    ),
    "step never sent": (
        [[np.array([0]), step()]],
        items(["t"], [1.0], [1], [7]),
        "an item references steps [7] that this call does not send",
    ),
    "step sent twice": (
        [[np.array([0, 0]), [np.concatenate([c, c]) for c in step()]]],
        items(["t"], [1.0], [1], [0]),
        "an insert sends step 0 twice",
    ),
    "length the signature has not": (
        [[np.array([0, 1]), [np.zeros((2, 2), np.float32)]]],
        items(["seq"], [1.0], [2], [0, 1]),
        "replay table 'seq' takes items of 1 or 3 steps (its signature), not one of 2",
    ),
    "NaN priority": (
        [[np.array([0]), step()]],
        items(["t"], [float("nan")], [1], [0]),
        "priorities must be finite numbers >= 0, got nan",
    ),
    "negative priority": (
        [[np.array([0]), step()]],
        items(["t"], [-1.0], [1], [0]),
        "priorities must be finite numbers >= 0, got -1.0",
    ),
}


@pytest.mark.parametrize("case", list(INSERTS))
def test_an_authenticated_insert_that_does_not_fit_its_table_is_refused_and_the_node_serves_on(node, case):
    steps, payload, says = INSERTS[case]
    assert_refused(node, lambda raw: raw.insert("bad", steps, payload, np.array([], np.int64), 5.0), says)


def test_a_bad_insert_through_shared_memory_is_refused_as_one_over_rpc(node):
    """The same checks hold for steps a writer on the server's host lays in its segment."""
    from shoal.replay.native import NativeReplayClient

    replay, raw, _ = node
    client = NativeReplayClient(raw, raw.address, shared_memory=True)
    segment = client.shared_segment(1 << 20)
    places, views = segment.reserve([(np.dtype(c.dtype), c.shape) for c in step(observation=NAN_OBS)])
    for view, column in zip(views, step(observation=NAN_OBS)):
        view[...] = column
    del views, view  # (the segment closes once no view of it is left)
    try:
        assert_refused(
            node,
            lambda raw: raw.insert_shared(
                "bad",
                segment.name,
                [[np.array([0]), places]],
                items(["t"], [1.0], [1], [0]),
                np.array([], np.int64),
                5.0,
            ),
            "column 1 (float32) holds NaN or inf",
        )
    finally:
        client.release_segment(segment)


def test_insert_and_mutate_priorities_keep_one_rule_for_priorities(node):
    replay, raw, client = node
    raw.insert("w", [[np.array([0]), step()]], items(["t"], [1.0], [1], [0]), np.array([0]), 5.0)
    key = int(client.sample_batch("t", 1, 5.0)["key"][0])
    for bad, shown in ((float("nan"), "nan"), (-2.0, "-2.0"), (float("inf"), "inf")):
        with pytest.raises(RemoteError, match=f"priorities must be finite numbers >= 0, got {shown}"):
            raw.mutate_priorities("t", {key: bad}, [])
        with pytest.raises(RemoteError, match=f"priorities must be finite numbers >= 0, got {shown}"):
            raw.insert("w", [[np.array([1]), step()]], items(["t"], [bad], [1], [1]), np.array([1]), 5.0)
    assert sizes(client)["t"] == 1
    raw.mutate_priorities("t", {key: 0.0}, [])  # (zero is a priority both take)


@pytest.mark.parametrize("num_items", [10**9, MAX_SAMPLE_ITEMS + 1, 0, -1])
def test_a_sample_of_more_items_than_a_learner_asks_for_is_refused(node, num_items):
    replay, raw, client = node
    raw.insert("w", [[np.array([0]), step()]], items(["t"], [1.0], [1], [0]), np.array([0]), 5.0)
    with pytest.raises(RemoteError) as raised:
        raw.sample("t", num_items, 1.0)
    assert f"a sample asks for 1 to {MAX_SAMPLE_ITEMS:,} items (MAX_SAMPLE_ITEMS), got {num_items}" in str(raised.value)
    assert info_samples(client) == 0
    served = client.sample_batch("t", 10**9, 0.5)  # (the client asks for at most the bound: what came)
    assert served is not None and 1 <= len(served["key"]) <= MAX_SAMPLE_ITEMS


def info_samples(client):
    return client.server_info()["t"].rate_limiter_info.sample_stats.completed


def test_a_table_keeps_one_item_length_and_a_correct_sequence_item_goes_in(node):
    replay, raw, client = node
    x = np.arange(6, dtype=np.float32).reshape(3, 2)
    assert raw.insert("s", [[np.array([0, 1, 2]), [x]]], items(["seq"], [1.0], [3], [0, 1, 2]), np.array([]), 5.0) == 1
    with pytest.raises(RemoteError, match="holds items of 3 steps; an item of 1 steps"):
        raw.insert(
            "s",
            [[np.array([3]), [np.zeros((1, 3, 2), np.float32)]]],
            items(["seq"], [1.0], [1], [3]),
            np.array([]),
            5.0,
        )
    np.testing.assert_array_equal(client.sample_batch("seq", 1, 5.0)["columns"][0], x[None])


# -- the Ray launcher's bind address (item 4) -------------------------------------------------------


def test_servers_under_a_local_ray_bind_loopback_unless_asked():
    from shoal.launch.programs.ray.launcher import bind_hosts

    assert bind_hosts(None, True, "10.1.2.3") == ("127.0.0.1", "127.0.0.1")  # a local Ray: loopback
    assert bind_hosts(None, False, "10.1.2.3") == ("0.0.0.0", "10.1.2.3")  # a cluster: every interface
    assert bind_hosts("0.0.0.0", True, "10.1.2.3") == ("0.0.0.0", "10.1.2.3")  # asked for
    assert bind_hosts("10.1.2.3", True, "10.1.2.3") == ("10.1.2.3", "10.1.2.3")


# -- resume from a replay checkpoint that is incomplete or damaged (items 6 and 7) ----------------

SMALL = [
    "--agent",
    "dqn",
    "--env",
    "CartPole-v1",
    "--num-envs",
    "8",
    "--seed",
    "0",
    "--replay",
    "native",
    "--set",
    "min_replay_size=100",
    "--target-return",
    "1e9",
    "--eval-episodes",
    "2",
    "--quiet",
    "--max-env-steps",
    "300",
]


@pytest.fixture(scope="module")
def finished_runs(tmp_path_factory):
    """Two small native runs that ended with a checkpoint: one process, and distributed."""
    from tests.shoal_cli import run_shoal

    runs = {}
    for kind, args in (("one-process", []), ("distributed", ["--launcher", "inprocess", "--num-actors", "1"])):
        run_dir = tmp_path_factory.mktemp(kind) / "run"
        done = run_shoal("train", *SMALL, *args, "--run-dir", str(run_dir), timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        runs[kind] = run_dir
    return runs


def _copy(run_dir, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    shutil.rmtree(copy / "tb", ignore_errors=True)
    os.remove(copy / "result.json")
    return copy


def _files(run_dir):
    return {
        (path, name, os.stat(os.path.join(path, name)).st_size, os.stat(os.path.join(path, name)).st_mtime_ns)
        for path, _, names in os.walk(run_dir)
        for name in names
        if name != ".lock"
    }


def _replay_checkpoint(run_dir):
    name = json.loads((run_dir / "checkpoints" / "run.json").read_text())["replay_checkpoint"]
    return run_dir / "checkpoints" / "replay" / name


def _resume(run_dir, capsys):
    from shoal.launch.experiments.cli.main import main

    code = main(["train", "--resume", str(run_dir), "--quiet"])
    err = capsys.readouterr().err
    return code, [line for line in err.splitlines() if line.startswith("shoal: error:")], err


def _truncate(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _edit(change):
    def edit(path):
        record = json.loads(path.read_text())
        change(record)
        path.write_text(json.dumps(record))

    return edit


def _first_table(record):
    return next(iter(record["tables"].values()))


DAMAGES = {  # case -> (file, damage, what the line says)
    "no DONE": ("DONE", os.remove, "has no DONE file, so the replay checkpoint that"),
    "truncated steps.npz": ("steps.npz", _truncate, "steps.npz: cannot be read (BadZipFile"),
    "tables.json not JSON": ("tables.json", lambda p: p.write_text("{not json"), "tables.json: cannot be read"),
    "tables.json without layouts": (
        "tables.json",
        _edit(lambda r: r.pop("layouts")),
        "tables.json: layouts must be a list of column counts, got null",
    ),
    "an item's step beyond steps.npz": (
        "tables.json",
        _edit(lambda r: _first_table(r)["items"][0][3][0].__setitem__(1, 10**6)),
        "names step 1000000 of layout 0, which holds",
    ),
    "an item's layout that is not": (
        "tables.json",
        _edit(lambda r: _first_table(r)["items"][0][3][0].__setitem__(0, 7)),
        "items[0] must be [key, priority >= 0, times sampled, [[layout, row], ...]]",
    ),
    "an item that is not a list": (
        "tables.json",
        _edit(lambda r: _first_table(r)["items"].__setitem__(0, 5)),
        "items[0] must be [key, priority",
    ),
    "a NaN priority": (
        "tables.json",
        lambda p: p.write_text(p.read_text().replace(", 1.0, ", ", NaN, ", 1)),
        "items[0] must be [key, priority >= 0",
    ),
    "counts of the wrong type": (
        "tables.json",
        _edit(lambda r: _first_table(r)["counts"].update(inserts="5")),
        'counts.inserts must be an integer >= 0, got "5"',
    ),
    "a sampler state that is not": (
        "tables.json",
        _edit(lambda r: _first_table(r)["counts"].update(rng={"a": 1})),
        "counts.rng must be a numpy PCG64 generator state",
    ),
}


@pytest.mark.e2e
@pytest.mark.timeout(600)
@pytest.mark.parametrize("kind", ["one-process", "distributed"])
@pytest.mark.parametrize("case", list(DAMAGES))
def test_a_resume_refuses_an_incomplete_or_damaged_replay_checkpoint_in_one_line_naming_it(
    finished_runs, tmp_path, capsys, kind, case
):
    run_dir = _copy(finished_runs[kind], tmp_path)
    name, damage, says = DAMAGES[case]
    checkpoint = _replay_checkpoint(run_dir)
    older = run_dir / "checkpoints" / "replay" / "00000000000000000001"  # (an older complete one: kept)
    shutil.copytree(checkpoint, older)
    damage(checkpoint / name)
    before = _files(run_dir)
    code, lines, err = _resume(run_dir, capsys)
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err[-3000:]
    assert says in lines[0] and str(checkpoint) in lines[0] and len(lines[0]) < 500, lines[0]
    assert _files(run_dir) == before and not (run_dir / "tb").exists()  # (nothing removed, nothing written)


@pytest.mark.e2e
@pytest.mark.timeout(600)
def test_a_damaged_checkpoint_given_to_a_replay_server_is_one_line_naming_the_file(finished_runs):
    """The server's own restore (the distributed replay node's, and a checkpoint that changed
    after a resume checked it) refuses it as the resume does, before it holds anything."""
    from shoal.launch.experiments.config import experiment_config
    from shoal.replay.native import NativeReplayServer
    from shoal.replay.native.checkpoint_files import Damaged

    checkpoint = _replay_checkpoint(finished_runs["one-process"])
    assert _first_table(json.loads((checkpoint / "tables.json").read_text()))["items"], "no item checkpointed"
    config = experiment_config(
        "dqn", "CartPole-v1", preset=None, agent_settings={"min_replay_size": 100}, seed=0, num_envs=8, replay="native"
    )
    tables = config.builder.make_replay_tables(config.environment_spec())
    work = checkpoint.parent.parent.parent / "server-copy"
    shutil.copytree(checkpoint, work / checkpoint.name)
    _truncate(work / checkpoint.name / "steps.npz")
    with pytest.raises(Damaged) as raised:
        NativeReplayServer(tables, checkpoint_dir=str(work))
    assert str(raised.value).startswith(f"{work / checkpoint.name / 'steps.npz'}: cannot be read (BadZipFile")
    shutil.rmtree(work)


def test_no_replay_checkpoint_is_removed_before_a_newer_complete_one_exists(tmp_path):
    from shoal.launch.experiments.run_directory.replay_checkpoints import keep_only_replay_checkpoint

    replay = tmp_path / "checkpoints" / "replay"
    for name in ("A", "B"):
        (replay / name).mkdir(parents=True)
        (replay / name / "tables.json").write_text("{}")
    (replay / "A" / "DONE").write_text("")
    keep_only_replay_checkpoint(str(tmp_path / "checkpoints"), "B")  # (B unfinished: A stays)
    assert sorted(p.name for p in replay.iterdir()) == ["A", "B"]
    (replay / "B" / "DONE").write_text("")
    keep_only_replay_checkpoint(str(tmp_path / "checkpoints"), "B")
    assert sorted(p.name for p in replay.iterdir()) == ["B"]


def test_a_writer_that_lets_go_of_a_step_twice_frees_no_step_an_item_holds(node):
    """The writer's hold on a step goes once, however often a call lets go of it: the items that
    use the step keep it (a learner's sample would otherwise fail on a step that is gone)."""
    replay, raw, client = node
    raw.insert("w", [[np.array([0]), step()]], items(["t"], [1.0], [1], [0]), np.array([0, 0]), 5.0)
    raw.insert("w", [], items([], [], [], []), np.array([0]), 5.0)
    sampled = client.sample_batch("t", 1, 5.0)
    assert sampled["columns"][1].shape == (1, ENVS, 3) and len(replay._store) == 1
