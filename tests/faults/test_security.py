"""What a hostile local process, a second run or a full disk can do to a run: each refused
with one clear line, the run itself unharmed."""

import os
import signal
import subprocess

import grpc
import psutil
import pytest

from shoal.launch.programs.rpc.client import RemoteError, RpcClient
from tests.faults.harness import SMALL, errors, node_pids, running, start
from tests.shoal_cli import run_shoal, start_shoal
from tests.waiting import wait_for

pytestmark = pytest.mark.e2e  # live runs probed from outside

TOKEN = "test-token-0123456789"


def train(*args, wrapper=(), **popen):
    return run_shoal("train", *SMALL, *args, python_args=wrapper, timeout=300, **popen)


@pytest.mark.timeout(400)
def test_live_run_refuses_strangers_and_a_second_run(tmp_path):
    run_dir = tmp_path / "run"
    proc = start(
        run_dir,
        "--max-env-steps",
        str(10**8),
        "--eval-every",
        str(10**8),
        num_actors=1,
        env=dict(os.environ, SHOAL_TOKEN=TOKEN),
    )
    try:
        wait_for(
            lambda: running(run_dir, "counter", "learner", "actor_0", "evaluator"), 180, "the program's nodes to serve"
        )
        counter = (run_dir / "addresses" / "counter").read_text()
        for token in (None, "a-wrong-token"):  # no token, or a wrong one: refused before the body is read
            with pytest.raises(RemoteError) as refused:
                RpcClient(counter, token=token, timeout_s=10).increment(env_steps=10**9)
            assert refused.value.code == grpc.StatusCode.UNAUTHENTICATED
        client = RpcClient(counter, token=TOKEN, timeout_s=10)
        with pytest.raises(RemoteError) as hidden:  # restore is not a remote method
            client.restore({"env_steps": 10**9})
        assert hidden.value.code == grpc.StatusCode.UNIMPLEMENTED
        assert client.get_counts().get("env_steps", 0) < 10**9
        for pid in node_pids(proc.pid).values():  # the token reaches nodes through their environment
            assert not any(TOKEN in part for part in psutil.Process(pid).cmdline())

        addresses = {p.name: p.read_text() for p in (run_dir / "addresses").iterdir()}
        second = start(run_dir, "--max-env-steps", "1000")
        out, err = second.communicate(timeout=120)
        assert second.returncode == 2, err[-2000:]
        assert len(errors(err)) == 1 and "in use by another run" in errors(err)[0], err[-2000:]
        assert {p.name: p.read_text() for p in (run_dir / "addresses").iterdir()} == addresses

        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 143, err[-3000:]


@pytest.mark.timeout(400)
def test_single_process_run_directory_is_locked_and_a_stale_lock_is_taken_over(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / ".lock").write_text("999999")  # left by a run that died: not held by anyone
    first = start_shoal(
        "train",
        *SMALL,
        "--max-env-steps",
        str(10**8),
        "--run-dir",
        "run",  # (a relative one: its checkpoint at SIGTERM too)
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(lambda: (run_dir / "train.csv").exists(), 180, "the first run to log")
        second = train("--max-env-steps", "1000", "--run-dir", str(run_dir))
        assert second.returncode == 2, second.stderr[-2000:]
        assert len(errors(second.stderr)) == 1, second.stderr[-2000:]
        assert f"in use by another run (pid {first.pid})" in errors(second.stderr)[0]
        first.send_signal(signal.SIGTERM)
        out, err = first.communicate(timeout=120)
    finally:
        first.kill()
    assert first.returncode == 143, err[-3000:]
    assert (run_dir / "checkpoints" / "run.json").exists()


# ``python SMALL_FILES ARGS...``: ``python ARGS...`` that may write files of 100 kB at most (a write
# past the limit fails with EFBIG: SIGXFSZ ignored): set, then exec (not a preexec_fn, which
# runs Python in a fork of this multithreaded process before exec and can deadlock there).
SMALL_FILES = [
    "-c",
    "import os, resource, signal, sys; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
    "resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000)); "
    "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])",
]


@pytest.mark.timeout(300)
def test_a_full_disk_gives_one_clear_line(tmp_path):
    # a checkpoint every 2 s: the replay checkpoint soon passes the 100 kB file limit
    proc = train(
        "--max-env-steps",
        str(10**8),
        "--checkpoint-every",
        "2",
        "--run-dir",
        str(tmp_path / "run"),
        wrapper=SMALL_FILES,
    )
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    shoal_lines = [line for line in proc.stderr.splitlines() if line.startswith("shoal:")]
    assert len(shoal_lines) == 1 and "File too large" in shoal_lines[0], proc.stderr[-3000:]
