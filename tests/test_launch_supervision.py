"""Supervision of the real distributed DQN program, launched by the real CLI, one process per node."""

import csv
import json
import os
import re
import signal
import subprocess
import sys
import time

import psutil
import pytest

from tests.waiting import wait_for

ARGS = ["train", "--agent", "dqn", "--env", "CartPole-v1", "--launcher", "processes",
        "--num-actors", "2", "--seed", "0", "--target-return", "1e9", "--quiet"]


def start(tmp_path, max_env_steps):
    run_dir = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "shoal", *ARGS, "--max-env-steps",
                             str(max_env_steps), "--run-dir", str(run_dir)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return proc, run_dir


def node_pids(launcher_pid):
    """{label: pid} of the launcher's node processes."""
    out = {}
    for child in psutil.Process(launcher_pid).children(recursive=True):
        try:
            cmd = child.cmdline()
        except psutil.Error:
            continue
        if "shoal.launch.programs.worker" in cmd:
            out[os.path.basename(cmd[cmd.index("shoal.launch.programs.worker") + 1])[:-4]] = child.pid
    return out


def running(run_dir, label):
    return (run_dir / "addresses" / label).exists()


def alive(pids):
    return [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]


def test_killed_actor_is_restarted_and_run_completes(tmp_path):
    proc, run_dir = start(tmp_path, max_env_steps=30_000)
    try:
        wait_for(lambda: all(running(run_dir, n) for n in ("learner", "actor_0", "actor_1")), 120, "nodes")
        pids = node_pids(proc.pid)
        # Hold actor_1 still while actor_0 is down, so no env step is taken (and the budget cannot
        # run out) until the restarted actor_0 is back: the test waits on that event, not a timer.
        os.kill(pids["actor_1"], signal.SIGSTOP)
        os.kill(pids["actor_0"], signal.SIGKILL)
        log = run_dir / "logs" / "actor_0.log"
        wait_for(lambda: log.read_text().count("[actor_0] started") == 2, 120, "actor_0 to restart")
        os.kill(pids["actor_1"], signal.SIGCONT)
        out, err = proc.communicate(timeout=240)
    finally:
        proc.kill()
    assert proc.returncode == 0, err[-3000:]
    result = json.loads(out.strip().splitlines()[-1])
    assert result["env_steps"] >= 30_000 and result["launcher"] == "processes"
    assert "actor_0 exited with -9; restart 1/3" in err
    # summary row: (stopped cooperatively, or killed after the grace period) with 1 restart
    assert re.search(r"\n  actor_0 +actor +(stopped|killed) +1  ", err), err[-2000:]
    assert (run_dir / "logs" / "actor_0.log").read_text().count("[actor_0] started") == 2
    with open(run_dir / "actor_1.csv") as f:  # actors log their speed and staleness
        rows = list(csv.DictReader(f))
    assert rows and {"steps_per_s", "params_version", "staleness"} <= set(rows[-1])
    assert all(int(float(r["staleness"])) >= 0 for r in rows)


def test_killing_the_learner_stops_every_process_within_10s(tmp_path):
    proc, run_dir = start(tmp_path, max_env_steps=10**7)
    try:
        wait_for(lambda: all(running(run_dir, n) for n in ("learner", "actor_0", "actor_1")), 120, "nodes")
        pids = node_pids(proc.pid)
        assert set(pids) == {"replay", "counter", "learner", "actor_0", "actor_1", "evaluator"}
        killed_at = time.monotonic()
        os.kill(pids["learner"], signal.SIGKILL)
        wait_for(lambda: not alive(list(pids.values()) + [proc.pid]), 10, "every process to exit")
        assert time.monotonic() - killed_at < 10
        out, err = proc.communicate(timeout=5)
    finally:
        proc.kill()
    assert proc.returncode == 1
    assert "shoal: error: program 'dqn' failed: learner exited with code -9" in err


def test_sigint_to_the_launcher_leaves_no_process(tmp_path):
    proc, run_dir = start(tmp_path, max_env_steps=10**7)
    try:
        wait_for(lambda: all(running(run_dir, n) for n in ("learner", "actor_0", "actor_1")), 120, "nodes")
        pids = list(node_pids(proc.pid).values())
        assert len(pids) == 6
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 130
    assert not alive(pids)
    leftovers = [p for p in psutil.process_iter(["cmdline"])
                 if p.info["cmdline"] and any(str(run_dir) in part for part in p.info["cmdline"])]
    assert not leftovers
