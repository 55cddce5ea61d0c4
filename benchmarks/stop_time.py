"""Ctrl-C under load: how long `shoal train` takes to leave after SIGINT beside CPU-bound processes.

    python benchmarks/stop_time.py [--hogs 2] [--repeats 3]

Each repeat starts ``--hogs`` busy-looping processes, then a distributed DQN CartPole run
(``--launcher processes --num-actors 2``, an endless budget), waits until every node has
published its address (it serves), sends SIGINT to the launcher and measures, from the signal:
``nodes_gone_s`` (every node process has exited) and ``exit_s`` (the launcher has exited, with
its exit status). Also ``start_s``: from the launch to every node serving, under the same load.
One JSON object on stdout (medians and each repeat). Needs psutil (the dev extra).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import psutil

SERVING = ("learner", "actor_0", "actor_1")  # (nodes that publish an address once they serve)


def _hog() -> None:
    while True:
        pass


def _node_pids(launcher_pid: int) -> list[int]:
    out = []
    for child in psutil.Process(launcher_pid).children(recursive=True):
        try:
            if "shoal.launch.programs.worker" in child.cmdline():
                out.append(child.pid)
        except psutil.Error:
            continue
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


def one_stop(hogs: int) -> dict:
    run_dir = os.path.join(tempfile.mkdtemp(prefix="shoal-stop-"), "run")
    workers = [mp.Process(target=_hog, daemon=True) for _ in range(hogs)]
    for w in workers:
        w.start()
    cmd = [sys.executable, "-m", "shoal", "train", "--agent", "dqn", "--env", "CartPole-v1", "--seed", "0",
           "--num-envs", "8", "--max-env-steps", str(10**9), "--target-return", "1e9", "--quiet",
           "--launcher", "processes", "--num-actors", "2", "--run-dir", run_dir]
    # (SIGINT as a terminal gives it, even where this script runs in the background with it ignored)
    log = open(os.path.join(os.path.dirname(run_dir), "stderr.log"), "w")
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        serving = lambda: all(os.path.exists(os.path.join(run_dir, "addresses", n)) for n in SERVING)  # noqa: E731
        start_s = _wait(serving, 600, "node serving (every address published)")
        pids = _node_pids(proc.pid)
        signalled = time.monotonic()
        proc.send_signal(signal.SIGINT)
        nodes_gone_s = _wait(lambda: not _alive(pids), 300, "exit of every node")
        proc.wait(timeout=300)
        exit_s = time.monotonic() - signalled
    finally:
        proc.kill()
        log.close()
        for w in workers:
            w.terminate()
    return {"start_s": round(start_s, 2), "nodes_gone_s": round(nodes_gone_s, 2), "exit_s": round(exit_s, 2),
            "exit_status": proc.returncode, "nodes": len(pids)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hogs", type=int, default=2, help="CPU-bound processes beside the run")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    runs = []
    for i in range(args.repeats):
        runs.append(one_stop(args.hogs))
        print(f"[stop_time] {i + 1}/{args.repeats}: {runs[-1]}", file=sys.stderr, flush=True)
    median = {k: statistics.median(r[k] for r in runs) for k in ("start_s", "nodes_gone_s", "exit_s")}
    print(json.dumps({"hogs": args.hogs, "cpu_count": os.cpu_count(), "median": median, "runs": runs}), flush=True)


if __name__ == "__main__":
    main()
