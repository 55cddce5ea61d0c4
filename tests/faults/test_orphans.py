"""Nothing outlives a run: a shared-memory segment whose writer was killed with SIGKILL (or
whose launcher was) is removed by its keeper."""

import os
import signal
import subprocess
import sys

import pytest

from tests.faults.harness import alive, node_pids, running, shm_segments, start
from tests.waiting import wait_for

# A writer of a segment in a directory of the test's own (``argv[1]``: no other run's sweep looks there).
PUBLISH = (
    "import sys; from shoal.core import shared_memory as m; m.SHM_DIR = sys.argv[1]; "
    "p = m.SharedValuePublisher('params', 1024); p.publish(1, {'w': 1}); print(p.path, flush=True); "
    "sys.stdin.read()"
)


def test_a_segment_whose_writer_is_killed_is_removed(tmp_path):
    writer = subprocess.Popen(
        [sys.executable, "-c", PUBLISH, str(tmp_path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    path = writer.stdout.readline().strip()
    assert os.path.dirname(path) == str(tmp_path) and os.path.exists(path), path
    writer.kill()  # (SIGKILL: the writer runs no cleanup)
    writer.wait()
    wait_for(lambda: not os.path.exists(path), 30, f"{path} to be removed")


def test_a_segment_outlives_the_kill_of_its_writers_children(tmp_path):
    """Ray kills a worker's child processes when the worker ends: the keeper is not one of them."""
    import psutil

    writer = subprocess.Popen(
        [sys.executable, "-c", PUBLISH, str(tmp_path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    path = writer.stdout.readline().strip()
    for child in psutil.Process(writer.pid).children(recursive=True):
        child.kill()
    writer.kill()
    writer.wait()
    wait_for(lambda: not os.path.exists(path), 30, f"{path} to be removed")


def test_a_segment_closed_leaves_no_keeper(tmp_path):
    writer = subprocess.Popen(
        [sys.executable, "-c", PUBLISH.replace("sys.stdin.read()", "p.close(); sys.stdin.read()"), str(tmp_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    path = writer.stdout.readline().strip()
    import psutil

    def keepers():
        found = []
        for process in psutil.process_iter(["cmdline"]):
            if path in (process.info["cmdline"] or []):
                found.append(process)
        return found

    try:
        wait_for(lambda: not keepers(), 30, "the keeper to end")
        assert not os.path.exists(path)
    finally:
        writer.kill()
        writer.wait()


@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_sigkill_of_the_driver_leaves_no_segment(tmp_path):
    run_dir = tmp_path / "run"
    proc = start(run_dir, "--max-env-steps", "1000000", num_actors=1)
    try:
        wait_for(lambda: running(run_dir, "learner", "actor_0"), 120, "the nodes to serve")
        pids = node_pids(proc.pid)
        wait_for(lambda: shm_segments([pids["learner"]]), 60, "the learner's segment")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        wait_for(lambda: not alive(pids.values()), 30, "the nodes to die with their launcher")
        wait_for(
            lambda: not shm_segments(pids.values()), 5, "their segments to be removed"
        )  # (by their keepers, at once)
    finally:
        proc.kill()
        proc.communicate()


def serving_local_ray_run(run_dir, **start_args):
    """A small DQN program under a local Ray of its own, once its actor reports steps; and every
    process it started by then (``{pid: psutil.Process}``, Ray's included)."""
    import psutil

    proc = start(run_dir, "--max-env-steps", "1000000", launcher="ray", num_actors=1, **start_args)
    seen = {}

    def serving():
        for child in psutil.Process(proc.pid).children(recursive=True):
            seen.setdefault(child.pid, child)
        return (run_dir / "actor_0.csv").exists()

    try:
        wait_for(serving, 400, "the actor to report steps")
        serving()
    except BaseException:
        proc.kill()
        proc.communicate()
        raise
    return proc, seen


def still_running(processes):
    import psutil

    return [p for p in processes if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


@pytest.mark.e2e
@pytest.mark.ray
@pytest.mark.timeout(600)
def test_a_local_ray_stopped_by_a_signal_leaves_no_process(tmp_path):
    """A run that started its own Ray (no ``--ray-address``) takes all of it down when it ends:
    Ray's dashboard and runtime-env agents and idle workers outlived a run by 60-90 s (parent 1)."""
    pytest.importorskip("ray")
    proc, seen = serving_local_ray_run(tmp_path / "run", default_sigint=True)
    try:
        assert any("DashboardAgent" in " ".join(p.cmdline()) for p in still_running(seen.values())), seen
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=120)
        assert proc.returncode == 130
        wait_for(lambda: not still_running(seen.values()), 10, "every process of the run's Ray to end")
    finally:
        proc.kill()
        proc.communicate()


@pytest.mark.e2e
@pytest.mark.ray
@pytest.mark.timeout(600)
def test_sigkill_of_a_driver_that_started_its_own_ray_leaves_no_process_and_no_segment(tmp_path):
    """SIGKILL runs no cleanup in the driver: Ray's processes are killed by the reaper beside
    them (its agents waited ~60 s on the dead GCS), the nodes end with Ray, and the learner's
    shared-memory segment is removed by its keeper (which Ray, killing a worker's children, missed)."""
    pytest.importorskip("ray")
    proc, seen = serving_local_ray_run(tmp_path / "run")
    try:
        wait_for(lambda: shm_segments(seen), 60, "the learner's segment")
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate()
        wait_for(lambda: not still_running(seen.values()), 30, "every process of the run's Ray to end")
        wait_for(lambda: not shm_segments(seen), 10, "the learner's segment to be removed")
    finally:
        proc.kill()
        proc.communicate()
