"""SIGTERM stops an offline agent's run (``--dataset``) with a checkpoint that ``--resume``
continues, as it stops every one-process run (``shoal.launch.experiments.interrupts``): the
``shoal`` executable in a subprocess, as a user or a scheduler stops it.

Needs the ``offline`` extra (minari) and skips without it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.minari_datasets import collect

minari = pytest.importorskip("minari", reason="the offline extra")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _push_towards_the_lean(observation, rng, space):
    return int(observation[2] + 0.5 * observation[3] > 0)


def _evaluations(run_dir: str) -> int:
    try:
        with open(os.path.join(run_dir, "eval.csv")) as f:
            return max(0, len(f.read().strip().splitlines()) - 1)
    except FileNotFoundError:
        return 0


@pytest.mark.e2e
def test_sigterm_checkpoints_an_offline_run_and_resume_finishes_it(tmp_path):
    dataset = collect(str(tmp_path / "minari"), "CartPole-v1", "cartpole-lean-v0", 5, _push_towards_the_lean)
    run_dir = str(tmp_path / "run")
    shoal = [sys.executable, "-m", "shoal", "train", "--quiet"]
    process = subprocess.Popen(
        [*shoal, "--agent", "bc", "--env", "CartPole-v1", "--dataset", dataset, "--seed", "0",
         "--max-env-steps", "100000000", "--eval-every", "100", "--eval-episodes", "1",
         "--target-return", "100000", "--run-dir", run_dir],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 300  # (a failure's bound only: the run is waited on by its eval.csv)
        while _evaluations(run_dir) < 1 and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _evaluations(run_dir) >= 1, process.communicate(timeout=60)[1][-3000:]
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=300)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 143, err[-3000:]
    with open(os.path.join(run_dir, "checkpoints", "run.json")) as f:
        stopped_at = json.load(f)["env_steps"]  # (learner steps, for an offline agent)
    assert stopped_at >= 100
    assert json.loads(out.strip().splitlines()[-1])["terminated"] == "SIGTERM"
    budget = stopped_at + 50
    done = subprocess.run(
        [*shoal, "--resume", run_dir, "--max-env-steps", str(budget)], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"resumed {run_dir} at learner step {stopped_at:,}" in done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["learner_steps"] == budget and "terminated" not in result
