"""Elastic actors: a running distributed program grows from 1 to 3 actors and back to 1 with
`shoal scale`, while its learner keeps updating, then ends gracefully with its JSON line."""

import json
import signal
import subprocess

import pytest

from tests.shoal_cli import run_shoal, start_shoal
from tests.waiting import csv_rows, wait_for

pytestmark = pytest.mark.e2e  # a distributed program grown and shrunk while it trains

RUN = [
    "--agent",
    "dqn",
    "--env",
    "CartPole-v1",
    "--num-envs",
    "8",
    "--seed",
    "0",
    "--num-actors",
    "1",
    "--set",
    "min_replay_size=256",
    "--max-env-steps",
    str(10**8),
    "--target-return",
    "1e9",
    "--eval-every",
    str(10**8),
    "--quiet",
]


def shoal(*args):
    proc = run_shoal(*args, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    table = proc.stdout.split("\n\n")[0]  # (status: the run's summary follows a blank line)
    return {line.split()[0]: line.split()[2] for line in table.splitlines()[1:]}  # label -> state


def learner_steps(run_dir):
    rows = csv_rows(run_dir / "learner.csv")
    return int(float(rows[-1]["learner_steps"])) if rows else 0


def check_grows_and_shrinks(tmp_path, *launcher_args):
    run_dir = tmp_path / "run"
    proc = start_shoal(
        "train",
        *RUN,
        *launcher_args,
        "--run-dir",
        str(run_dir),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(lambda: (run_dir / "control.json").exists(), 180, "the program to start")
        steps = wait_for(lambda: learner_steps(run_dir), 180, "the learner's first updates")
        table = shoal("scale", str(run_dir), "--actors", "3")
        assert table.get("actor_0") == "running", table
        assert {table.get(f"actor_{i}") for i in (1, 2)} <= {"running", "pending"}, table  # (pending: Ray places them)
        wait_for(
            lambda: [shoal("status", str(run_dir)).get(f"actor_{i}") for i in range(3)] == ["running"] * 3,
            120,
            "the new actors to run",
        )
        # an actor writes its first row after its first report to the counter: both new actors count
        wait_for(
            lambda: csv_rows(run_dir / "actor_1.csv") and csv_rows(run_dir / "actor_2.csv"),
            180,
            "the new actors to act",
        )
        steps = wait_for(
            lambda: learner_steps(run_dir) > steps and learner_steps(run_dir), 60, "the learner to go on with 3 actors"
        )
        shoal("scale", str(run_dir), "--actors", "1")
        wait_for(
            lambda: (
                [shoal("status", str(run_dir)).get(f"actor_{i}") for i in range(3)] == ["running", "removed", "removed"]
            ),
            60,
            "actors 1 and 2 to be removed",
        )
        wait_for(lambda: learner_steps(run_dir) > steps, 60, "the learner to go on with 1 actor")
        proc.send_signal(signal.SIGTERM)  # a graceful stop: the run's result, then exit 143
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 143, err[-3000:]
    result = json.loads(out.strip().splitlines()[-1])
    assert result["terminated"] == "SIGTERM" and result["learner_steps"] > 0
    assert {"actor_0", "actor_1", "actor_2"} <= set(result["actor_steps_per_s_each"])
    for label in ("actor_1", "actor_2"):  # the node table shows the change
        assert any(line.split()[:3] == [label, "actor", "removed"] for line in err.splitlines()), err[-2000:]


@pytest.mark.slow  # (CI time, ~90 s: `shoal scale` is tested in CI by tests/faults/test_counts.py, the
# scaling beneath it by the autoscaler's tests; -m slow runs this under processes and Ray)
def test_processes_program_grows_and_shrinks(tmp_path):
    check_grows_and_shrinks(tmp_path, "--launcher", "processes")
