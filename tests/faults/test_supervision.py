"""Node faults of the real distributed DQN program, launched by the real CLI, one process per
node: each kind of node killed, an actor frozen, failing environments, signals to the launcher.
Every outcome is waited for as an event, under a hard timeout."""

import csv
import json
import os
import re
import signal
import time

import psutil
import pytest

from shoal.launch.experiments.run_directory.directory import RunDirectory
from shoal.replay import default_backend
from tests.faults.harness import alive, errors, node_pids, running, start
from tests.shoal_cli import run_shoal
from tests.waiting import csv_rows, wait_for

pytestmark = pytest.mark.e2e  # distributed runs whose nodes are killed


def tensorflow_loaded(pid):
    with open(f"/proc/{pid}/maps") as f:
        return "_pywrap_tensorflow_internal" in f.read()


def started(proc, run_dir, num_actors=1):
    actors = [f"actor_{i}" for i in range(num_actors)]
    wait_for(lambda: running(run_dir, "learner", *actors), 120, "the nodes to serve")
    pids = node_pids(proc.pid)
    assert set(pids) == {"replay", "counter", "learner", "evaluator", *actors}, pids
    return pids


@pytest.mark.timeout(300)
def test_killed_actor_is_restarted_continues_its_schedule_and_run_completes(tmp_path):
    run_dir = tmp_path / "run"
    # One actor: while it is down no env step is taken, so the budget cannot run out before the
    # restarted actor is back, and that actor takes the rest of the budget (several of its reports).
    proc = start(run_dir, "--max-env-steps", "12000", "--eval-every", "12000", num_actors=1)
    try:
        pids = started(proc, run_dir)
        wait_for(lambda: csv_rows(run_dir / "actor_0.csv"), 60, "actor_0 to report steps")
        os.kill(pids["actor_0"], signal.SIGKILL)
        log = run_dir / "logs" / "actor_0.log"
        wait_for(lambda: log.read_text().count("[actor_0] started") == 2, 120, "actor_0 to restart")
        out, err = proc.communicate(timeout=240)
    finally:
        proc.kill()
    assert proc.returncode == 0, err[-3000:]
    result = json.loads(out.strip().splitlines()[-1])
    assert result["env_steps"] >= 12_000 and result["launcher"] == "processes"
    assert "actor_0 exited with -9; restart 1/3" in err
    # summary row: (stopped cooperatively, or killed after the grace period) with 1 restart
    assert re.search(r"\n  actor_0 +actor +(stopped|killed) +1  ", err), err[-2000:]
    # the restarted actor continued its epsilon schedule (it did not start over at 1.0) ...
    assert re.search(r"\[actor_0\] continues its schedules from [0-9,]+ env steps", log.read_text())
    assert (
        len(csv_rows(run_dir / "actor_0.csv")) >= 2
    )  # ... and its CSV kept the rows of its first life (appended, not rewritten)
    with open(run_dir / "actor_0.csv") as f:  # actors log their speed and staleness
        rows = list(csv.DictReader(f))
    assert rows and {"steps_per_s", "params_version", "staleness"} <= set(rows[-1])
    assert all(int(float(r["staleness"])) >= 0 for r in rows)


@pytest.mark.timeout(300)
# (replay and counter take the learner's path to a failure: -m slow runs them)
@pytest.mark.parametrize(
    "victim",
    [
        "learner",
        pytest.param("replay", marks=pytest.mark.slow),
        pytest.param("counter", marks=pytest.mark.slow),
        "evaluator",
    ],
)
def test_killing_a_non_restartable_node_stops_every_process_within_10s(tmp_path, victim):
    """...and a failed program still checkpoints what its living learner, replay and counter hold."""
    run_dir = tmp_path / "run"
    proc = start(run_dir, "--max-env-steps", str(10**8), "--eval-every", str(10**8), num_actors=1)
    try:
        pids = started(proc, run_dir)
        # while the learner trains: its users are then blocked on a dead replay or counter
        wait_for(lambda: csv_rows(run_dir / "learner.csv"), 120, "the learner to train")
        killed_at = time.monotonic()
        os.kill(pids[victim], signal.SIGKILL)
        wait_for(lambda: not alive(list(pids.values()) + [proc.pid]), 10, "every process to exit")
        took = time.monotonic() - killed_at
        out, err = proc.communicate(timeout=5)
    finally:
        proc.kill()
    assert proc.returncode == 1 and took < 10
    assert errors(err) == [
        f"shoal: error: program 'dqn' failed: {victim} exited with code -9 (see {run_dir}/logs/{victim}.log)"
    ], err[-2000:]
    # The evaluator's death leaves learner, replay and counter alive: their state is saved once more.
    assert (run_dir / "checkpoints" / "run.json").exists() == (victim == "evaluator"), err[-2000:]


@pytest.mark.timeout(300)
def test_a_frozen_actor_does_not_stop_the_run_and_is_killed_at_its_end(tmp_path):
    run_dir = tmp_path / "run"
    proc = start(run_dir, "--max-env-steps", "6000", "--eval-every", "6000")
    try:
        pids = started(proc, run_dir, num_actors=2)
        os.kill(pids["actor_1"], signal.SIGSTOP)  # hangs, never exits
        out, err = proc.communicate(timeout=240)
    finally:
        proc.kill()
    assert proc.returncode == 0, err[-3000:]
    result = json.loads(out.strip().splitlines()[-1])
    # actor_0 took the budget, but for the steps granted to the frozen actor_1 (StepGrants): the
    # run ended once actor_1's heartbeat had stopped for STALL_S, short by what actor_1 holds, and
    # said so on the terminal
    assert result["env_steps"] <= 6000 + 7 and result["env_steps"] + result.get("env_steps_held", 0) >= 6000
    if "env_steps_held" in result:
        assert re.search(
            r"\nshoal: warning: the run ends at [\d,]+ of its 6,000 env steps: the rest is granted "
            r"to actor_1 ",
            err,
        ), err[-2000:]
    assert re.search(r"\n  actor_1 +actor +killed +0  ", err), err[-2000:]  # after the grace period
    # (counted all the same: it ran)
    assert result["num_actors"] == 2 and result["actors_without_summary"] == {"actor_1": "killed"}, result
    assert not alive(list(pids.values()))


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "env, message",
    [
        pytest.param("RaisesInStep-v0", "the environment raised in step() after", marks=pytest.mark.slow),
        ("NaNObservations-v0", "the environment returned a non-finite observation after"),
    ],
)
def test_a_failing_environment_ends_in_one_line(tmp_path, env, message):
    env_id = f"tests.faults.faulty_envs:{env}"
    # one process: the first failure is the run's error
    single = run_shoal(
        "train",
        "--agent",
        "dqn",
        "--env",
        env_id,
        "--num-envs",
        "8",
        "--run-dir",
        str(tmp_path / "single"),
        "--quiet",
        timeout=240,
    )
    assert single.returncode == 1 and len(errors(single.stderr)) == 1, single.stderr[-2000:]
    assert message in errors(single.stderr)[0] and "Traceback" not in single.stderr
    if env != "RaisesInStep-v0":  # (the distributed path is the same for every failure: run it once)
        return
    # distributed: the actor is restarted (its env fails again), then the program fails
    run_dir = tmp_path / "run"
    proc = start(run_dir, "--env", env_id, "--max-env-steps", str(10**8), "--eval-every", str(10**8))
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 1
    assert "restart 3/3" in err and len(errors(err)) == 1, err[-2000:]
    assert re.search(
        r"program 'dqn' failed: actor_\d failed: RuntimeError: " + re.escape(message), errors(err)[0]
    )  # (its exception)
    assert message in (run_dir / "logs" / "actor_0.log").read_text() + (run_dir / "logs" / "actor_1.log").read_text()


@pytest.mark.timeout(300)
def test_sigterm_to_the_launcher_stops_gracefully_with_result_and_checkpoint(tmp_path):
    run_dir = tmp_path / "run"
    proc = start(run_dir, "--max-env-steps", str(10**8), "--eval-every", str(10**8), num_actors=1)
    try:
        pids = started(proc, run_dir)
        wait_for(lambda: csv_rows(run_dir / "learner.csv"), 120, "the learner to update")
        # an actor writes to replay without TensorFlow's Python package, the replay server is
        # built without it, and the counter and the evaluator need none; the learner samples with
        # it on Reverb (the native backend never imports it)
        reverb = default_backend() == "reverb"
        assert [
            tensorflow_loaded(pids[label]) for label in ("actor_0", "replay", "counter", "evaluator", "learner")
        ] == [False, False, False, False, reverb]
        stopped_at = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
        took = time.monotonic() - stopped_at
    finally:
        proc.kill()
    assert proc.returncode == 143, err[-3000:]
    result = json.loads(out.strip().splitlines()[-1])
    assert result["terminated"] == "SIGTERM" and result["learner_steps"] > 0
    assert "ended: terminated (SIGTERM)" in err and took < 15  # every node honours should_stop()
    assert re.search(r"\n  evaluator +evaluator +stopped +0  ", err)  # (not killed)
    assert json.loads((run_dir / "result.json").read_text()) == result
    assert json.loads((run_dir / "config.json").read_text())["launch"]["launcher"] == "processes"
    assert json.loads((run_dir / "checkpoints" / "run.json").read_text())["learner_version"] > 0
    assert not alive(list(pids.values()))


@pytest.mark.timeout(300)
def test_sigint_to_the_launcher_leaves_no_process_and_exits_at_once(tmp_path):
    # An exit hook that would hold any interpreter that finalizes for ten minutes: once its nodes
    # are gone and its lock released, the launcher leaves without tearing its libraries down
    # (which took 10-14 s on a busy machine). Each step is waited for as the event it is.
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import atexit, time\natexit.register(time.sleep, 600)\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]))
    run_dir = tmp_path / "run"
    # SIGINT's default action in the launcher, as a terminal gives it: a test runner started in
    # the background (by a script without job control) ignores SIGINT, and its children inherit that.
    proc = start(
        run_dir, "--max-env-steps", str(10**8), "--eval-every", str(10**8), num_actors=1, env=env, default_sigint=True
    )
    try:
        pids = list(started(proc, run_dir).values())
        proc.send_signal(signal.SIGINT)
        wait_for(lambda: not alive(pids), 120, "every node to exit")
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130 and "shoal: interrupted" in err, err[-2000:]
    leftovers = [
        p
        for p in psutil.process_iter(["cmdline"])
        if p.info["cmdline"] and any(str(run_dir) in part for part in p.info["cmdline"])
    ]
    assert not leftovers
    RunDirectory(str(run_dir)).lock().unlock()  # released: a new run may take the directory
