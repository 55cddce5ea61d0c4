"""How fast Shoal starts: a one-process run to its first env step, and a distributed run until
every node serves, and which of its processes import TensorFlow.

    python benchmarks/start_time.py [--repeats 3]

* ``one_process``: ``shoal train --agent A --env CartPole-v1 --seed 0 --quiet`` for DQN and
  PPO; from its result: ``first_step_s`` (process seconds, from the OS starting the command to
  its first env step), ``wall_s`` and ``process_s``.
* ``processes``: ``shoal train --agent dqn --launcher processes --num-actors 2`` (an endless
  budget, then Ctrl-C): ``serving_s``, from the launch to the moment every node published its
  address (each node's own moment too), and ``tensorflow``: the nodes that had TensorFlow's
  Python package loaded once all served.

Warm caches (run it twice: the first run may compile). One JSON object on stdout: medians, and
each repeat. Needs psutil (the dev extra).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from stop_time import node_pids  # (benchmarks/, the script's directory)

from shoal.core.files import json_text

NODES = ("replay", "counter", "learner", "actor_0", "actor_1", "evaluator")


def one_process(agent: str) -> dict:
    cmd = [sys.executable, "-m", "shoal", "train", "--agent", agent, "--env", "CartPole-v1", "--seed", "0", "--quiet"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tempfile.mkdtemp(prefix="shoal-start-"))
    if out.returncode != 0:
        raise SystemExit(f"start_time: {' '.join(cmd)} failed:\n{out.stderr[-2000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    return {k: result.get(k) for k in ("first_step_s", "wall_s", "process_s", "env_steps", "solved")}


def _tensorflow_loaded(pid: int) -> bool:
    with open(f"/proc/{pid}/maps") as f:
        return "_pywrap_tensorflow_internal" in f.read()


def processes() -> dict:
    base = tempfile.mkdtemp(prefix="shoal-start-")
    run_dir = os.path.join(base, "run")
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
    started = time.time()
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    serving: dict[str, float] = {}
    try:
        while len(serving) < len(NODES):
            if time.time() - started > 300 or proc.poll() is not None:
                raise SystemExit(f"start_time: the nodes did not all serve (served: {serving})")
            for node in NODES:
                path = os.path.join(run_dir, "addresses", node)
                if node not in serving and os.path.exists(path):
                    serving[node] = round(os.path.getmtime(path) - started, 2)
            time.sleep(0.02)
        loaded = {node: _tensorflow_loaded(pid) for node, pid in node_pids(proc.pid).items()}
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(base, ignore_errors=True)
    return {
        "serving_s": max(serving.values()),
        "nodes": serving,
        "tensorflow": sorted(node for node, has in loaded.items() if has),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    runs: dict[str, list] = {"dqn": [], "ppo": [], "processes": []}
    for i in range(args.repeats):
        for name in runs:
            runs[name].append(processes() if name == "processes" else one_process(name))
            print(f"[start_time] {name} {i + 1}/{args.repeats}: {runs[name][-1]}", file=sys.stderr, flush=True)
    median = {
        name: {k: statistics.median(r[k] for r in these) for k in these[0] if isinstance(these[0][k], float)}
        for name, these in runs.items()
    }
    print(json_text({"cpu_count": os.cpu_count(), "median": median, "runs": runs}), flush=True)


if __name__ == "__main__":
    main()
