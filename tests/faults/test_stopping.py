"""A stop that is quick from the first second: SIGINT or SIGTERM at any moment of a distributed
run -- while it imports, while its nodes start, while they serve, twice -- ends it with 130 or
143, no traceback, no process and no shared-memory segment left, and its directory free."""

import json
import signal
import subprocess
import sys
import threading
import time

import psutil
import pytest

from shoal.launch.experiments.run_directory.directory import RunDirectory
from tests.faults.harness import DEFAULT_SIGINT, SMALL, alive, handles_sigterm, node_pids, running, shm_segments, start
from tests.shoal_cli import start_shoal
from tests.waiting import csv_rows, wait_for

pytestmark = pytest.mark.e2e  # real runs stopped by signals

EXIT = {signal.SIGINT: 130, signal.SIGTERM: 143}
LINE = {signal.SIGINT: "shoal: interrupted", signal.SIGTERM: "shoal: terminated"}
# A generous bound, not the goal: benchmarks/stop_time.py measures the time to exit (under 1 s
# here before the nodes serve). The old code took 21-41 s to leave a run that was starting.
WITHIN_S = 15


@pytest.fixture
def cpu_hogs(request):
    """``request.param`` busy-looping processes (at nice 10: they keep the cores busy whenever
    shoal's processes leave them idle, without starving the test another xdist worker runs)."""
    hogs = [
        subprocess.Popen([sys.executable, "-c", "import os\nos.nice(10)\nwhile True: pass"])
        for _ in range(request.param)
    ]
    yield
    for hog in hogs:
        hog.kill()
        hog.wait()


def _launch(run_dir):
    # (SIGINT's default action, as a terminal gives it, even where the test runner ignores it)
    return start(
        run_dir,
        "--max-env-steps",
        str(10**8),
        "--eval-every",
        str(10**8),
        "--checkpoint-every",
        "1000000",
        default_sigint=True,
    )


def _ended(proc, run_dir, pids, signalled):
    out, err = proc.communicate(timeout=120)
    took = time.monotonic() - signalled
    wait_for(lambda: not alive(pids), 30, "every node process to end")
    assert "Traceback" not in err, err[-3000:]
    assert not shm_segments(pids)
    assert not [
        p
        for p in psutil.process_iter(["cmdline"])
        if p.info["cmdline"] and any(str(run_dir) in part for part in p.info["cmdline"])
    ]
    if run_dir.exists():
        RunDirectory(str(run_dir)).lock().unlock()  # released: a new run may take the directory
    return out, err, took


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_while_shoal_imports_ends_it_at_once_in_one_line(tmp_path, sig):
    proc = _launch(tmp_path / "run")
    try:
        wait_for(lambda: handles_sigterm(proc.pid), 60, "shoal to take its signals")
        signalled = time.monotonic()
        proc.send_signal(sig)
        out, err, took = _ended(proc, tmp_path / "run", [], signalled)
    finally:
        proc.kill()
    assert proc.returncode == EXIT[sig] and LINE[sig] in err, err[-3000:]
    assert took < WITHIN_S


# Beside two busy processes only with -m slow: with them, four of this machine's suite runs saw the
# VM's kernel stall (dmesg: "workqueue lockup ... stuck for 35-108s") while they ran, and this test
# and its xdist neighbour fail then; benchmarks/stop_time.py --hogs 2 measures the stop under load.
@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "cpu_hogs", [0, pytest.param(2, marks=pytest.mark.slow)], indirect=True, ids=["idle", "two-busy-processes"]
)
def test_sigterm_while_the_nodes_start_stops_them_at_once(tmp_path, cpu_hogs):
    run_dir = tmp_path / "run"
    proc = _launch(run_dir)
    try:
        # the run has claimed its directory and is starting its nodes (importing, compiling)
        wait_for(lambda: len(node_pids(proc.pid)) == 6, 120, "the six node processes to start")
        pids = list(node_pids(proc.pid).values())
        signalled = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        out, err, took = _ended(proc, run_dir, pids, signalled)
    finally:
        proc.kill()
    assert proc.returncode == 143 and "shoal: error" not in err, err[-3000:]
    assert took < WITHIN_S, err[-3000:]


@pytest.mark.timeout(300)
def test_a_second_ctrl_c_kills_every_node_and_leaves_nothing_behind(tmp_path):
    run_dir = tmp_path / "run"
    proc = _launch(run_dir)
    lines = []
    try:
        wait_for(
            lambda: running(run_dir, "replay", "counter", "learner", "actor_0", "actor_1", "evaluator"),
            240,
            "every node to serve",
        )
        wait_for(lambda: shm_segments(node_pids(proc.pid).values()), 60, "the learner's parameters in shared memory")
        pids = list(node_pids(proc.pid).values())
        reader = threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True)
        reader.start()
        signalled = time.monotonic()
        proc.send_signal(signal.SIGINT)
        wait_for(lambda: any(line.startswith("shoal: stopping") for line in lines), 60, "the first Ctrl-C to be taken")
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)
        reader.join(30)
        out, err, took = _ended(proc, run_dir, pids, signalled)
    finally:
        proc.kill()
    err = "".join(lines)
    assert proc.returncode == 130 and "shoal: interrupted" in err and "every node is killed" in err, err[-3000:]
    table = err[err.index("program 'dqn' ended") :]
    assert " running " not in table, table
    assert took < WITHIN_S, err[-3000:]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("sig, moment", [(signal.SIGTERM, "config.json"), (signal.SIGINT, "train.csv")])
def test_a_one_process_run_leaves_at_once_while_setting_up_and_stops_with_its_result_once_training(
    tmp_path, sig, moment
):
    run_dir = tmp_path / "run"
    proc = start_shoal(
        "train",
        *SMALL,
        "--max-env-steps",
        str(10**8),
        "--run-dir",
        str(run_dir),
        python_args=DEFAULT_SIGINT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # config.json: the run claimed its directory and is setting up (Reverb, networks, compiling);
        # train.csv and learner.csv with a row: it trains, its learner's update compiled (a signal
        # during that first compile waits for it: XLA does not give the thread back to Python, and
        # on a loaded CI machine it took 19.7 s once -- the compile, not the stop)
        wait_for(
            lambda: (
                proc.poll() is not None
                or (run_dir / moment).exists()
                and (moment != "train.csv" or csv_rows(run_dir / moment) and csv_rows(run_dir / "learner.csv"))
            ),
            180,
            moment,
        )
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        signalled = time.monotonic()
        proc.send_signal(sig)
        out, err, took = _ended(proc, run_dir, [], signalled)
    finally:
        proc.kill()
    assert proc.returncode == EXIT[sig], err[-3000:]
    if out.strip():  # (stopped while training: the result of what it did)
        assert json.loads(out.strip().splitlines()[-1])["terminated"] == signal.Signals(sig).name
    else:
        assert LINE[sig] in err, err[-3000:]
    assert took < WITHIN_S
