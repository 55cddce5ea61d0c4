"""Ctrl-C under load: how long `shoal train` takes to leave after SIGINT (or SIGTERM) beside
CPU-bound processes, at several moments of a run.

    python benchmarks/stop_time.py [--hogs 2] [--repeats 3] [--at serving,claimed,start] [--signal INT]

Each repeat starts ``--hogs`` busy-looping processes, then a distributed DQN CartPole run
(``--launcher processes --num-actors 2``, an endless budget), and sends the signal to the
launcher at one moment (``--at``, several comma-separated: each measured in turn):
``start`` (as soon as the process handles signals: it is importing), ``claimed`` (its run directory
holds ``config.json``: nodes are starting), ``serving`` (every node has published its address).
Measured from the signal: ``nodes_gone_s`` (every node process has exited) and ``exit_s`` (the
launcher has exited, with its exit status). Also ``start_s``: from the launch to the moment.
One JSON object on stdout (medians per moment, and each repeat). Needs psutil (the dev extra).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import psutil

from shoal.core.files import json_text

SERVING = (
    "replay",
    "counter",
    "learner",
    "actor_0",
    "actor_1",
    "evaluator",
)  # (each publishes its address once it serves)


def handles_sigterm(pid: int) -> bool:
    """Whether process ``pid`` has its own SIGTERM handler (``shoal``'s first lines install one)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            caught = next(line for line in f if line.startswith("SigCgt:")).split()[1]
    except (OSError, StopIteration):
        return False
    return bool(int(caught, 16) >> (signal.SIGTERM - 1) & 1)


def _hog() -> None:
    while True:
        pass


def node_pids(launcher_pid: int) -> dict[str, int]:
    """``{label: pid}`` of the launcher's node processes."""
    out = {}
    for child in psutil.Process(launcher_pid).children(recursive=True):
        try:
            cmd = child.cmdline()
        except psutil.Error:
            continue
        if "shoal.launch.programs.worker" in cmd:
            out[cmd[cmd.index("shoal.launch.programs.worker") + 1]] = child.pid
    return out


def _alive(pids: list[int]) -> bool:
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            pass
    return False


def _wait(condition, timeout_s: float, what: str) -> float:
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > timeout_s:
            raise SystemExit(f"stop_time: no {what} within {timeout_s:.0f} s")
        time.sleep(0.02)
    return time.monotonic() - started


def one_stop(hogs: int, at: str = "serving", sig: int = signal.SIGINT) -> dict:
    run_dir = os.path.join(tempfile.mkdtemp(prefix="shoal-stop-"), "run")
    workers = [mp.Process(target=_hog, daemon=True) for _ in range(hogs)]
    for w in workers:
        w.start()
    cmd = [
        sys.executable,
        "-m",
        "shoal",
        "train",
        "--agent",
        "dqn",
        "--env",
        "CartPole-v1",
        "--seed",
        "0",
        "--num-envs",
        "8",
        "--max-env-steps",
        str(10**9),
        "--target-return",
        "1e9",
        "--quiet",
        "--launcher",
        "processes",
        "--num-actors",
        "2",
        "--run-dir",
        run_dir,
    ]
    # (SIGINT as a terminal gives it, even where this script runs in the background with it ignored)
    log = open(os.path.join(os.path.dirname(run_dir), "stderr.log"), "w")  # noqa: SIM115 -- the child's stderr while it runs
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=log, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)
    )
    moments = {
        "start": lambda: handles_sigterm(proc.pid),
        "claimed": lambda: os.path.exists(os.path.join(run_dir, "config.json")),
        "serving": lambda: all(os.path.exists(os.path.join(run_dir, "addresses", n)) for n in SERVING),
    }
    try:
        start_s = _wait(moments[at], 600, f"moment {at!r}")
        pids = list(node_pids(proc.pid).values())
        signalled = time.monotonic()
        proc.send_signal(sig)
        nodes_gone_s = _wait(
            lambda: not _alive(pids + list(node_pids(proc.pid).values())) if proc.poll() is None else not _alive(pids),
            300,
            "exit of every node",
        )
        proc.wait(timeout=300)
        exit_s = time.monotonic() - signalled
    finally:
        proc.kill()
        log.close()
        for w in workers:
            w.terminate()
    return {
        "at": at,
        "start_s": round(start_s, 2),
        "nodes_gone_s": round(nodes_gone_s, 2),
        "exit_s": round(exit_s, 2),
        "exit_status": proc.returncode,
        "nodes": len(pids),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hogs", type=int, default=2, help="CPU-bound processes beside the run")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--at", default="serving", help="moments to signal at: start, claimed, serving")
    parser.add_argument("--signal", default="INT", choices=("INT", "TERM"))
    args = parser.parse_args()
    sig = getattr(signal, f"SIG{args.signal}")
    runs, median = [], {}
    for at in args.at.split(","):
        these = []
        for i in range(args.repeats):
            these.append(one_stop(args.hogs, at, sig))
            print(f"[stop_time] {at} {i + 1}/{args.repeats}: {these[-1]}", file=sys.stderr, flush=True)
        median[at] = {k: statistics.median(r[k] for r in these) for k in ("start_s", "nodes_gone_s", "exit_s")}
        runs += these
    print(
        json_text(
            {
                "hogs": args.hogs,
                "signal": f"SIG{args.signal}",
                "cpu_count": os.cpu_count(),
                "median": median,
                "runs": runs,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
