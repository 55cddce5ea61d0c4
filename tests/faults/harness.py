"""Launching the real CLI as a distributed program and finding its node processes; running
``shoal`` in this process and reading its error lines."""

import contextlib
import io
import os
import signal
import subprocess

import psutil

from tests.shoal_cli import start_shoal

# ``[sys.executable, *DEFAULT_SIGINT, ARGS...]`` runs ``python ARGS...`` with SIGINT's default
# action, as a terminal gives it (a test runner started in the background ignores SIGINT, and its
# children inherit that): set, then exec. Not a ``preexec_fn``: that forks this multithreaded
# process (JAX, gRPC) and runs Python in the child before exec, which can deadlock there.
DEFAULT_SIGINT = [
    "-c",
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
    "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])",
]

SMALL = [
    "--agent",
    "dqn",
    "--env",
    "CartPole-v1",
    "--num-envs",
    "8",
    "--seed",
    "0",
    "--set",
    "min_replay_size=256",
    "--target-return",
    "1e9",
    "--eval-episodes",
    "2",
    "--quiet",
]


def start(run_dir, *args, launcher="processes", num_actors=2, default_sigint=False, **popen):
    """``shoal train`` of a small DQN program (``args`` added last), as a subprocess
    (``default_sigint``: with SIGINT's default action, ``DEFAULT_SIGINT``)."""
    return start_shoal(
        "train",
        *SMALL,
        "--launcher",
        launcher,
        "--num-actors",
        str(num_actors),
        "--run-dir",
        str(run_dir),
        *args,
        python_args=DEFAULT_SIGINT if default_sigint else (),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **popen,
    )


def node_pids(launcher_pid):
    """{label: pid} of the launcher's node processes."""
    out = {}
    for child in psutil.Process(launcher_pid).children(recursive=True):
        try:
            cmd = child.cmdline()
        except psutil.Error:
            continue
        if "shoal.launch.programs.worker" in cmd:
            out[cmd[cmd.index("shoal.launch.programs.worker") + 1]] = child.pid
    return out


def running(run_dir, *labels):
    """Whether every node in ``labels`` published its address (it serves)."""
    return all((run_dir / "addresses" / label).exists() for label in labels)


def alive(pids):
    out = []
    for p in pids:
        try:
            if psutil.Process(p).status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out


def errors(stderr):
    return [line for line in stderr.splitlines() if line.startswith("shoal: error:")]


def handles_sigterm(pid):
    """Whether process ``pid`` has a SIGTERM handler of its own (``shoal`` installs one first thing)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            caught = next(line for line in f if line.startswith("SigCgt:")).split()[1]
    except (OSError, StopIteration):
        return False
    return bool(int(caught, 16) >> (signal.SIGTERM - 1) & 1)


def shm_segments(pids):
    """The shared-memory segments in /dev/shm written by any of ``pids``."""
    pids = {str(p) for p in pids}
    return [name for name in os.listdir("/dev/shm") if name.startswith("shoal-") and name.rsplit("-", 2)[1] in pids]


def shoal_main(*args):
    """``main(args)`` in this process: (exit status, the ``shoal: error:`` lines, all of stderr)."""
    from shoal.launch.experiments.cli.main import main

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = main(list(args))
    text = err.getvalue()
    return rc, [line for line in text.splitlines() if line.startswith("shoal: error:")], text
