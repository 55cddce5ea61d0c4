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
PUBLISH = ("import sys; from shoal.launch.programs import shared_memory as m; m.SHM_DIR = sys.argv[1]; "
           "p = m.SharedValuePublisher('params', 1024); p.publish(1, {'w': 1}); print(p.path, flush=True); "
           "sys.stdin.read()")


def test_a_segment_whose_writer_is_killed_is_removed(tmp_path):
    writer = subprocess.Popen([sys.executable, "-c", PUBLISH, str(tmp_path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    path = writer.stdout.readline().strip()
    assert os.path.dirname(path) == str(tmp_path) and os.path.exists(path), path
    writer.kill()  # (SIGKILL: the writer runs no cleanup)
    writer.wait()
    wait_for(lambda: not os.path.exists(path), 30, f"{path} to be removed")


def test_a_segment_closed_leaves_no_keeper(tmp_path):
    writer = subprocess.Popen([sys.executable, "-c", PUBLISH.replace("sys.stdin.read()", "p.close(); sys.stdin.read()"),
                               str(tmp_path)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    path = writer.stdout.readline().strip()
    import psutil

    try:
        wait_for(lambda: not psutil.Process(writer.pid).children(), 30, "the keeper to end")
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
        wait_for(lambda: not shm_segments(pids.values()), 5, "their segments to be removed")  # (by their keepers, at once)
    finally:
        proc.kill()
        proc.communicate()


@pytest.mark.e2e
@pytest.mark.ray
@pytest.mark.timeout(600)
def test_a_local_ray_stopped_by_a_signal_leaves_no_process(tmp_path):
    """A run that started its own Ray (no ``--ray-address``) takes all of it down when it ends:
    Ray's dashboard and runtime-env agents and idle workers outlived a run by 60-90 s (parent 1)."""
    pytest.importorskip("ray")
    import psutil

    run_dir = tmp_path / "run"
    proc = start(run_dir, "--max-env-steps", "1000000", launcher="ray", num_actors=1, default_sigint=True)
    seen = {}
    try:
        def serving():
            for child in psutil.Process(proc.pid).children(recursive=True):
                seen.setdefault(child.pid, child)
            return (run_dir / "actor_0.csv").exists()

        wait_for(serving, 400, "the actor to report steps")
        serving()
        assert any("DashboardAgent" in " ".join(p.cmdline()) for p in seen.values() if p.is_running()), seen
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=120)
        assert proc.returncode == 130
        wait_for(lambda: not [p for p in seen.values() if p.is_running() and p.status() != psutil.STATUS_ZOMBIE],
                 10, "every process of the run's Ray to end")
    finally:
        proc.kill()
        proc.communicate()
