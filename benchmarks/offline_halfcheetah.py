"""Offline RL on HalfCheetah-v5 (issue 58's Results row): SAC's replay as a dataset, IQL and CQL
trained offline on it, and SAC fine-tuned online from it, seed 0.

1. ``scratch``: ``shoal train --agent sac --env HalfCheetah-v5 --seed 0 --max-env-steps 300000
   --record-dataset DATASET --eval-every 10000 --eval-episodes 5``: every episode a learning SAC
   played, as a Minari dataset (a "medium-replay" analogue; the ``sac/mujoco`` preset). Its
   evaluations are also SAC from scratch: its env steps to a return of 6,000.
2. The dataset's episodes, steps, size on disk, and its returns' mean and quantiles (``minari``).
3. ``iql``, ``cql``: ``shoal train --agent iql|cql --env HalfCheetah-v5 --dataset DATASET --seed 0
   --max-env-steps 300000 --eval-every 25000 --eval-episodes 5`` (300,000 SGD steps, the agents'
   defaults; ``--set AGENT:KEY=VALUE`` adds settings), one after the other: final and best
   greedy returns against the dataset's mean.
4. ``online``: ``shoal train --agent sac --env HalfCheetah-v5 --dataset DATASET --seed 0
   --max-env-steps 300000 --eval-every 10000 --eval-episodes 5 --target-return 6000`` (replay
   seeded with the dataset, then online; it stops at the first evaluation of 6,000): its env
   steps to 6,000 against step 1's.

Every command runs as a user's does (the CLI, in a subprocess), and prints a progress line as
it starts and ends. Each step's JSON goes to ``--work`` (default /tmp/shoal-offline-halfcheetah)
and a step whose JSON is there is not run again: rerun the command to continue (a step stopped
after a checkpoint, e.g. by SIGTERM, goes on from it with ``shoal train --resume``). ``--steps``
runs some steps only (e.g. ``online`` in one process, ``iql cql`` in another: a step another
invocation is running is skipped). At the end the JSON of every finished step goes to
``benchmarks/results/mujoco/halfcheetah-offline.json``::

    nice -n 10 python benchmarks/offline_halfcheetah.py [--work DIR] [--steps scratch iql cql online]
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import os
import platform
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from offline import ROOT, shoal  # noqa: E402  (the CartPole benchmark's helpers)

from shoal.core.shared_memory import process_alive  # noqa: E402

OUT = os.path.join(ROOT, "benchmarks", "results", "mujoco", "halfcheetah-offline.json")
ENV = "HalfCheetah-v5"
GOAL = 6000.0
STEPS = ("scratch", "iql", "cql", "online")
NAMES = {"scratch": "sac-scratch", "iql": "iql", "cql": "cql", "online": "sac-online"}  # (each step's run and JSON)
COMMON = ["--env", ENV, "--seed", "0", "--max-env-steps", "300000", "--eval-episodes", "5", "--quiet"]


def evaluations(run_dir: str) -> list[dict]:
    """A run's ``eval.csv``: (env or SGD) steps, mean / min / max return, wall seconds."""
    with open(os.path.join(run_dir, "eval.csv")) as f:
        return [
            {
                "steps": int(row["env_steps"]),
                "return": round(float(row["eval_return"]), 2),
                "min": round(float(row["eval_return_min"]), 2),
                "max": round(float(row["eval_return_max"]), 2),
                "wall_s": round(float(row["wall_s"]), 1),
            }
            for row in csv.DictReader(f)
        ]


def step(work: str, name: str, argv: list[str]) -> dict | None:
    """Runs ``shoal ARGV`` once, its run directory ``WORK/NAME``: the command, its wall time, its
    JSON line and its evaluations go to ``WORK/NAME.json``. ``None`` where another invocation is
    running it."""
    done, lock, run_dir = (os.path.join(work, name + ext) for ext in (".json", ".running", ""))
    if os.path.exists(done):
        print(f"{name}: done before ({done})", flush=True)
        with open(done) as f:
            record = json.load(f)
        record.setdefault("evaluations", evaluations(run_dir))  # (a JSON this script's first version wrote)
        return record
    if os.path.exists(lock):
        with open(lock) as f:
            pid = int(f.read().strip() or 0)
        if pid and process_alive(pid):
            print(f"{name}: running in process {pid}, skipped", flush=True)
            return None
    with open(lock, "w") as f:
        f.write(str(os.getpid()))
    attempts_path = os.path.join(work, name + ".attempts.jsonl")
    try:
        command = [*argv, "--run-dir", run_dir]
        launch = command
        if os.path.exists(os.path.join(run_dir, "checkpoints", "run.json")) and "--record-dataset" not in argv:
            # (a run stopped before its end, e.g. by SIGTERM: on from its last checkpoint, its settings kept)
            budget = argv[argv.index("--max-env-steps") + 1]
            launch = ["train", "--resume", run_dir, "--max-env-steps", budget, "--quiet"]
        elif os.path.exists(run_dir):  # (no checkpoint, or a recording run: kept aside, run again)
            os.rename(run_dir, f"{run_dir}.unfinished-{int(time.time())}")
        print(f"{name}: shoal {' '.join(launch)}  [{time.strftime('%H:%M:%S')}]", flush=True)
        start = time.time()
        try:
            result = shoal(*launch)
        finally:
            with open(attempts_path, "a") as f:
                f.write(json.dumps({"command": "shoal " + " ".join(launch), "wall_s": round(time.time() - start, 1)}))
                f.write("\n")
        with open(attempts_path) as f:
            attempts = [json.loads(line) for line in f if line.strip()]
        record = {
            "command": "shoal " + " ".join(command),
            "wall_s": round(sum(attempt["wall_s"] for attempt in attempts), 1),
            "attempts": attempts,
            "result": result,
            "evaluations": evaluations(run_dir),
        }
        with open(done + ".tmp", "w") as f:
            json.dump(record, f, indent=1)
        os.replace(done + ".tmp", done)
    finally:
        os.remove(lock)
    print(f"{name}: done in {record['wall_s']} s [{time.strftime('%H:%M:%S')}]: {json.dumps(result)}", flush=True)
    return record


def dataset_statistics(path: str) -> dict:
    """Episodes, steps, bytes on disk and the returns' mean and quantiles of the Minari dataset at ``path``."""
    import minari  # (the offline extra)
    import numpy as np

    data = minari.MinariDataset(os.path.join(path, "data"))
    returns = np.array([float(e.rewards.sum()) for e in data.iterate_episodes()])
    size = sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)
    return {
        "path": path,
        "episodes": int(data.total_episodes),
        "steps": int(data.total_steps),
        "bytes": size,
        "return_mean": round(float(returns.mean()), 2),
        "return_std": round(float(returns.std()), 2),
        "return_quantiles": [round(float(q), 2) for q in np.quantile(returns, [0, 0.25, 0.5, 0.75, 1])],
        "quantiles_of": [0, 0.25, 0.5, 0.75, 1],
    }


def steps_to(curve: list[dict], goal: float) -> int | None:
    """The steps of the first evaluation at or above ``goal`` (``None``: none was)."""
    return next((point["steps"] for point in curve if point["return"] >= goal), None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", default="/tmp/shoal-offline-halfcheetah", help="runs, the dataset, each step's JSON")
    parser.add_argument("--steps", nargs="+", choices=STEPS, default=list(STEPS), help="the steps to run (in order)")
    parser.add_argument("--set", action="append", default=[], help="AGENT:KEY=VALUE for iql or cql")
    parser.add_argument("--out", default=OUT)
    args = parser.parse_args()
    work = os.path.abspath(args.work)
    os.makedirs(work, exist_ok=True)
    dataset = os.path.join(work, "halfcheetah-sac-replay-v0")
    if "scratch" in args.steps:
        step(work, NAMES["scratch"], [
            "train", "--agent", "sac", *COMMON, "--record-dataset", dataset, "--eval-every", "10000",
            "--target-return", "100000",
        ])  # fmt: skip
    if not os.path.exists(dataset):
        raise SystemExit(f"no dataset at {dataset} yet: run the 'scratch' step first")
    statistics = dataset_statistics(dataset)
    print(f"dataset: {json.dumps(statistics)}", flush=True)
    try:
        run_steps(args, work, dataset)
    finally:  # (a step that failed or was stopped: the others' results are written still)
        write_results(work, statistics, args.out)


def run_steps(args: argparse.Namespace, work: str, dataset: str) -> None:
    """Steps 3 and 4 (the module docstring), those of ``args.steps``, in order."""
    for agent in ("iql", "cql"):
        if agent in args.steps:
            sets = [flag for s in args.set if s.startswith(agent + ":") for flag in ("--set", s.split(":", 1)[1])]
            step(work, NAMES[agent], [
                "train", "--agent", agent, *COMMON, "--dataset", dataset, "--eval-every", "25000",
                "--target-return", "100000", *sets,
            ])  # fmt: skip
    if "online" in args.steps:
        step(work, NAMES["online"], [
            "train", "--agent", "sac", *COMMON, "--dataset", dataset, "--eval-every", "10000",
            "--target-return", str(int(GOAL)),
        ])  # fmt: skip


def write_results(work: str, statistics: dict, out: str) -> None:
    """The JSON of every finished step in ``work`` (whichever invocation ran it), to ``out``."""
    runs = {}
    for name in STEPS:
        path = os.path.join(work, NAMES[name] + ".json")
        run_dir = os.path.join(work, NAMES[name])
        if os.path.exists(path):
            with open(path) as f:
                runs[name] = {"finished": True, **json.load(f)}
            runs[name].setdefault("evaluations", evaluations(run_dir))
        elif os.path.exists(os.path.join(run_dir, "eval.csv")) and evaluations(run_dir):  # (stopped, or running)
            attempts_path = os.path.join(work, NAMES[name] + ".attempts.jsonl")
            with open(attempts_path) if os.path.exists(attempts_path) else contextlib.nullcontext([]) as f:
                attempts = [json.loads(line) for line in f if line.strip()]
            runs[name] = {"finished": False, "attempts": attempts, "evaluations": evaluations(run_dir)}
    summary: dict = {}
    for name, record in runs.items():
        curve = record["evaluations"]
        returns = [point["return"] for point in curve]
        summary[name] = {"finished": record["finished"], "final_return": returns[-1], "best_return": max(returns)}
        if "wall_s" in record:  # (a finished run's; a stopped one's attempts so far)
            summary[name]["wall_s"] = record["wall_s"]
        else:
            summary[name]["wall_s"] = round(sum(attempt["wall_s"] for attempt in record["attempts"]), 1)
        if name in ("scratch", "online"):
            summary[name]["env_steps_to_6000"] = steps_to(curve, GOAL)
        else:
            summary[name]["sgd_steps"] = curve[-1]["steps"]
            summary[name]["final_minus_dataset_mean"] = round(returns[-1] - statistics["return_mean"], 2)
            summary[name]["best_minus_dataset_mean"] = round(max(returns) - statistics["return_mean"], 2)
    record = {
        "benchmark": "offline RL on HalfCheetah-v5 (issue 58): SAC's replay, IQL and CQL offline, SAC offline-to-online",
        "command": " ".join(["python", "benchmarks/offline_halfcheetah.py", *sys.argv[1:]]),
        "python": platform.python_version(),
        "seed": 0,
        "goal_return": GOAL,
        "dataset": statistics,
        "summary": summary,
        "runs": runs,
        "unfinished": [name for name in STEPS if not runs.get(name, {}).get("finished")],
    }
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out + ".tmp", "w") as f:
        json.dump(record, f, indent=1)
        f.write("\n")
    os.replace(out + ".tmp", out)
    print(f"wrote {out}: {json.dumps(summary)}", flush=True)


if __name__ == "__main__":
    main()
