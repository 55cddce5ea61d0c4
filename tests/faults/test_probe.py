"""The faults a hostile probe of a running Shoal found, each refused with one clear line (or a
clear error to the caller), with nothing half-written. Checked in this process where the CLI's
own checks decide (``main``), against real programs and real checkpoints where they run."""

import json
import os
import shutil
import subprocess
import sys

import grpc
import numpy as np
import pytest

from shoal.core.counting import Counter
from shoal.core.shared_memory import SharedValuePublisher, sweep_segments
from shoal.launch import Program, Resources, ServiceNode, launch
from shoal.launch.programs.control import connect_control, serve_control
from shoal.launch.programs.rpc import RemoteError
from tests.faults.harness import shoal_main as shoal


def test_a_malformed_counter_increment_is_refused_and_the_counter_is_unchanged(tmp_path):
    program = Program("counting")
    program.add_node(ServiceNode(Counter, {"env_steps": 5}, methods=("increment", "get_counts")), label="counter")
    run = launch(program, "inprocess", run_dir=str(tmp_path))
    try:
        client = run.client("counter")
        for bad in (np.ones(3), float("nan"), float("inf"), "7", True, [1]):
            with pytest.raises(RemoteError) as refused:  # e.g. increment(env_steps=np.ones(3))
                client.increment(env_steps=bad, episodes=1)
            assert refused.value.code == grpc.StatusCode.UNKNOWN and "non-negative integers" in refused.value.details
        assert client.get_counts() == {"env_steps": 5}  # nothing of a refused call was added
        assert client.increment(env_steps=np.int64(3), episodes=2.0) == {"env_steps": 8, "episodes": 2}
    finally:
        run.stop()


@pytest.mark.parametrize("actors", ["0", "-1", "70", str(10**20)])
def test_scale_refuses_counts_out_of_range_before_touching_the_program(tmp_path, actors):
    rc, errors, text = shoal("scale", str(tmp_path), "--actors", actors)
    assert rc == 2 and len(errors) == 1 and "--actors must be in [1, 64]" in errors[0], text
    assert "Traceback" not in text


def test_the_control_service_keeps_a_group_within_its_bounds(tmp_path):
    program = Program("elastic")
    hub = program.add_node(ServiceNode(Counter), label="hub")
    program.add_group("worker", lambda i: ServiceNode(Counter), 2)
    del hub
    run = launch(program, "inprocess", run_dir=str(tmp_path))
    try:
        serve_control(run, str(tmp_path), {"worker": (1, 3)})
        control = connect_control(str(tmp_path))
        for count in (0, 4):
            with pytest.raises(RemoteError, match="between 1 and 3"):
                control.scale("worker", count)
        assert [r["label"] for r in control.scale("worker", 3) if r["state"] == "running"][-1] == "worker_2"
    finally:
        run.stop()


@pytest.mark.parametrize(
    "run_dir, expected",
    [
        ("/proc/shoal-cannot-be-here", "cannot use '/proc/shoal-cannot-be-here' as a run directory"),
        ("{file}/below-a-file", "as a run directory: Not a directory"),
    ],
)
def test_a_run_directory_that_cannot_be_made_is_one_line(tmp_path, run_dir, expected):
    (tmp_path / "file").write_text("")
    rc, errors, text = shoal(
        "train",
        "--run-dir",
        run_dir.format(file=tmp_path / "file"),
        "--max-env-steps",
        "300",
        "--set",
        "min_replay_size=100",
        "--quiet",
    )
    assert rc == 2 and len(errors) == 1 and expected in errors[0], text
    assert "Traceback" not in text


def test_damaged_control_files_are_named(tmp_path):
    (tmp_path / "control.json").write_text('{"address": "127.0.0.1:1", "progr')  # cut short
    (tmp_path / "control.token").mkdir()
    rc, errors, text = shoal("status", str(tmp_path))
    assert rc == 2 and errors == [
        f"shoal: error: {tmp_path / 'control.json'} is damaged (not the JSON a running "
        "program writes); is the program still running?"
    ], text
    (tmp_path / "control.json").write_text('{"address": "127.0.0.1:1"}')
    rc, errors, text = shoal("status", str(tmp_path))
    assert rc == 2 and len(errors) == 1 and f"cannot read {tmp_path / 'control.token'}" in errors[0], text


def test_resources_must_be_finite_and_not_negative():
    for text in ("actor:num_cpus=-1", "actor:num_gpus=inf", "learner:memory=nan", "actor:gpu_host=-2", "actor:"):
        rc, errors, out = shoal("train", "--launcher", "ray", "--resources", text, "--dry-run")
        assert rc == 2 and len(errors) == 1 and "--resources takes GROUP:NAME=VALUE" in errors[0], out
    with pytest.raises(ValueError, match="resource num_cpus must be a finite number >= 0, got -1"):
        Resources(num_cpus=-1)


def tree(path):
    """Every file under ``path`` with its size and modification time."""
    return {
        os.path.join(d, f): (os.path.getsize(os.path.join(d, f)), os.path.getmtime(os.path.join(d, f)))
        for d, _, files in os.walk(path)
        for f in files
        if f != ".lock"
    }  # (the lock is taken and released)


@pytest.fixture
def checkpointed(finished_dqn_run, tmp_path):
    """A real one-process run with its checkpoint (made from Python, once per session:
    tests/conftest.py), copied for the test, which changes its files."""
    run_dir = tmp_path / "run"
    shutil.copytree(finished_dqn_run, run_dir, symlinks=True)
    return run_dir


@pytest.mark.e2e
def test_resuming_against_another_environment_is_refused_before_anything_is_written(checkpointed):
    config_path = checkpointed / "config.json"
    original = config_path.read_text()
    try:
        config_path.write_text(original.replace('"CartPole-v1"', '"Acrobot-v1"'))
        before = tree(checkpointed)
        rc, errors, text = shoal("train", "--resume", str(checkpointed), "--quiet")
        assert rc == 2 and len(errors) == 1, text
        assert (
            "was made for another environment than config.json names: observation [[4], 'float32'] "
            "(checkpoint) vs [[6], 'float32'] (config.json)" in errors[0]
        )
        assert tree(checkpointed) == before and "Traceback" not in text
    finally:
        config_path.write_text(original)


@pytest.mark.e2e
def test_resuming_a_checkpoint_whose_learner_state_is_missing_is_refused(checkpointed):
    run_json = checkpointed / "checkpoints" / "run.json"
    original = run_json.read_text()
    try:
        run_json.write_text(json.dumps({**json.loads(original), "learner_step": 999_999}))
        before = tree(checkpointed)
        rc, errors, text = shoal("train", "--resume", str(checkpointed), "--quiet")
        assert rc == 2 and len(errors) == 1 and "names learner checkpoint step 999999, which is not in" in errors[0]
        assert tree(checkpointed) == before, text
        replay = json.loads(original).get("replay_checkpoint")
        if replay:  # (a replay checkpoint that is not there: the replay would start empty)
            run_json.write_text(json.dumps({**json.loads(original), "replay_checkpoint": "elsewhere"}))
            before = tree(checkpointed)
            rc, errors, text = shoal("train", "--resume", str(checkpointed), "--quiet")
            assert rc == 2 and len(errors) == 1 and "names replay checkpoint 'elsewhere', which is not in" in errors[0]
            assert tree(checkpointed) == before, text
        run_json.write_text(original[: len(original) // 2])  # cut short, as by a crash mid-write
        rc, errors, text = shoal("train", "--resume", str(checkpointed), "--quiet")
        assert rc == 2 and len(errors) == 1 and f"{run_json} (the run's latest checkpoint) is damaged" in errors[0]
    finally:
        run_json.write_text(original)
    config = checkpointed / "config.json"
    text_before = config.read_text()
    try:
        config.write_text(text_before[:40])
        rc, errors, text = shoal("train", "--resume", str(checkpointed), "--quiet")
        assert rc == 2 and len(errors) == 1 and f"{config} (the run's config) is damaged" in errors[0], text
    finally:
        config.write_text(text_before)


@pytest.mark.parametrize(
    "flags, named",
    [
        (["--set", "learning_rate=0.1"], "--set"),
        (["--seed", "0"], "--seed"),  # (given at its default value: still a change the run cannot take)
        (["--agent", "dqn", "--num-envs", "4", "--preset", "none"], "--num-envs, --preset"),  # (--agent names it again)
    ],
)
@pytest.mark.e2e
def test_resume_names_the_flags_it_cannot_take(checkpointed, flags, named):
    rc, errors, text = shoal("train", "--resume", str(checkpointed), *flags)
    assert rc == 2 and len(errors) == 1, text
    assert errors[0].startswith(f"shoal: error: --resume continues a run with its saved settings; drop {named} ")


def test_shared_memory_segments_of_dead_writers_are_swept(tmp_path):
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    ).stdout.strip()
    shm = "/dev/shm"
    left = os.path.join(shm, f"shoal-params-{dead}-123")  # as a learner killed with SIGKILL leaves it
    live = os.path.join(shm, f"shoal-params-{os.getpid()}-456")
    for path in (left, live):
        with open(path, "wb") as f:
            f.write(b"\0" * 64)
    try:
        assert sweep_segments([int(dead) + 1]) == []  # only the writers asked about
        assert sweep_segments() == [left] and os.path.exists(live)
        with open(left, "wb") as f:
            f.write(b"\0" * 64)
        publisher = SharedValuePublisher("params", 1024)  # a new run's learner sweeps it too
        publisher.close()
        assert not os.path.exists(left) and os.path.exists(live)
    finally:
        for path in (left, live):
            if os.path.exists(path):
                os.unlink(path)
