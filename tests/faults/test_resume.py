"""Checkpoint and resume, in one process and distributed, with the real CLI."""

import json
import os
import signal
import subprocess

import pytest

from tests.faults.harness import SMALL, errors, node_pids, running, start
from tests.shoal_cli import run_shoal, start_shoal
from tests.waiting import csv_rows, wait_for

pytestmark = pytest.mark.e2e  # real runs stopped, killed and resumed


def resume(run_dir, *args):
    return run_shoal("train", "--resume", str(run_dir), "--quiet", *args, timeout=300)


@pytest.mark.timeout(600)
def test_one_process_stops_on_sigterm_and_resumes_where_it_stopped(tmp_path):
    run_dir = tmp_path / "run"
    proc = start_shoal(
        "train",
        *SMALL,
        "--max-env-steps",
        str(10**8),
        "--eval-every",
        "2000",
        "--run-dir",
        str(run_dir),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(
            lambda: any(int(r["env_steps"]) >= 6000 for r in csv_rows(run_dir / "train.csv")), 240, "6000 env steps"
        )
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 143, err[-2000:]
    stopped = json.loads(out.strip().splitlines()[-1])
    assert stopped["terminated"] == "SIGTERM"
    saved = json.loads((run_dir / "checkpoints" / "run.json").read_text())
    assert saved["env_steps"] == stopped["env_steps"]
    evals_before = csv_rows(run_dir / "eval.csv")

    budget = saved["env_steps"] + 4000
    again = resume(run_dir, "--max-env-steps", str(budget))
    assert again.returncode == 0, again.stderr[-3000:]
    result = json.loads(again.stdout.strip().splitlines()[-1])  # the resumed run's final JSON line
    restored = result["resumed_from"]
    assert restored["learner_digest"] == saved["learner_digest"]  # the learner state, bit for bit
    assert restored["learner_version"] == saved["learner_version"]
    assert restored["replay_items"] == saved["replay_items"]  # replay restored
    assert restored["actor_env_steps"] == saved["actors"]["actor"]["env_steps"]  # epsilon schedule continues
    assert restored["actor_key"] == saved["actors"]["actor"]["key"]  # the actor's RNG continues, not reset
    assert restored["next_eval_at"] == saved["evaluator"]["next"] > saved["env_steps"] - 2000
    assert result["env_steps"] >= budget and result["learner_steps"] > saved["counter"]["learner_steps"]
    evals = csv_rows(run_dir / "eval.csv")  # the evaluation schedule continued where it was
    assert evals[: len(evals_before)] == evals_before
    assert int(evals[len(evals_before)]["env_steps"]) >= saved["evaluator"]["next"]
    assert result["num_evals"] == len(evals) and "shoal: resumed" in again.stderr


@pytest.mark.timeout(600)
def test_distributed_run_resumes_after_its_learner_was_killed(tmp_path):
    run_dir = tmp_path / "run"
    proc = start(
        run_dir, "--max-env-steps", str(10**8), "--eval-every", str(10**8), "--checkpoint-every", "1", num_actors=1
    )
    try:
        wait_for(lambda: running(run_dir, "learner", "actor_0"), 120, "the nodes to serve")
        learner = node_pids(proc.pid)["learner"]
        wait_for(lambda: (run_dir / "checkpoints" / "run.json").exists(), 120, "a checkpoint")
        os.kill(learner, signal.SIGKILL)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 1 and "learner exited with code -9" in errors(err)[0]
    saved = json.loads((run_dir / "checkpoints" / "run.json").read_text())

    again = resume(run_dir, "--max-env-steps", str(saved["env_steps"] + 3000))
    assert again.returncode == 0, again.stderr[-3000:]
    result = json.loads(again.stdout.strip().splitlines()[-1])
    restored = result["resumed_from"]
    assert result["launcher"] == "processes"  # the saved launch settings
    assert restored["learner_version"] == saved["learner_version"]
    assert restored["learner_digest"] == saved["learner_digest"]
    # replay holds what the checkpoint recorded (what came after it was lost with the run); actors
    # insert while Reverb checkpoints, so the recorded count is the range seen around it
    for table, items in restored["replay_items"].items():
        low, high = saved["replay_items_range"][table]
        assert low <= items <= high, (table, items, saved["replay_items_range"])
    assert restored["checkpoint_replay_items_range"] == saved["replay_items_range"]
    assert result["env_steps"] >= saved["env_steps"] + 3000 > result["env_steps"] - 10**5


@pytest.mark.timeout(120)
def test_a_fresh_run_refuses_a_directory_with_checkpoints_and_resume_needs_one(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "config.json").write_text(json.dumps({"agent": "dqn"}))
    out = resume(empty)
    assert out.returncode == 2 and errors(out.stderr) == [
        "shoal: error: not the config of a Shoal run (no agent_config, env_id in it)"
    ], out.stderr[-2000:]
    fresh = run_shoal(
        "train",
        *SMALL,
        "--max-env-steps",
        "300",
        "--set",
        "min_replay_size=100",
        "--run-dir",
        str(tmp_path / "run"),
        timeout=120,
    )
    assert fresh.returncode == 0, fresh.stderr[-2000:]  # ends with a checkpoint ...
    again = run_shoal(
        "train",
        *SMALL,
        "--max-env-steps",
        "300",
        "--set",
        "min_replay_size=100",
        "--run-dir",
        str(tmp_path / "run"),
        timeout=120,
    )
    assert again.returncode == 2 and "holds the checkpoints of an earlier run" in errors(again.stderr)[0]
    out = resume(tmp_path / "nowhere")
    assert out.returncode == 2 and errors(out.stderr) == [
        f"shoal: error: {str(tmp_path / 'nowhere')!r} is not a Shoal run directory (no config.json in it)"
    ]
