"""Offline RL on CartPole-v1 (issue 58's Results row): a dataset of a partly trained DQN, and the
offline agents trained on it.

1. ``shoal train --agent dqn --seed 0 --target-return 200``: DQN until a greedy evaluation
   averages 200 (a partly trained policy).
2. ``shoal record RUN --episodes 240 --epsilon 0.2``: ~50k steps of that policy with 20% of its
   actions uniformly random (a Minari dataset; its returns' mean and quantiles are reported).
3. ``shoal train --agent cql|bc|iql --dataset DATASET --seed S`` for seeds 0-2 (each agent's
   ``classic`` preset: its budget of SGD steps, evaluations of 10 greedy episodes every 1,000
   SGD steps), stopping at a mean return of 475.

Every command runs as a user's does (the CLI, in a subprocess), niced; the JSON goes to
``benchmarks/results/cartpole/offline.json``::

    nice -n 10 python benchmarks/offline.py [--seeds 0 1 2] [--agents cql bc iql] [--work DIR]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "benchmarks", "results", "cartpole", "offline.json")


def shoal(*argv: str) -> dict:
    """Runs ``python -m shoal ARGV`` and returns its last stdout line's JSON."""
    done = subprocess.run([sys.executable, "-m", "shoal", *argv], capture_output=True, text=True, check=False, cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"shoal {' '.join(argv)} failed ({done.returncode}): {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def evaluations(run_dir: str) -> list[dict]:
    with open(os.path.join(run_dir, "eval.csv")) as f:
        return [
            {"learner_steps": int(row["env_steps"]), "return": float(row["eval_return"])} for row in csv.DictReader(f)
        ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--agents", nargs="+", default=["cql", "bc", "iql"])
    parser.add_argument("--episodes", type=int, default=240, help="episodes recorded (~50k steps)")
    parser.add_argument("--data-target", type=float, default=200.0, help="DQN's greedy return when it stops")
    parser.add_argument("--set", action="append", default=[], help="KEY=VALUE for the offline agents")
    parser.add_argument("--work", default=None, help="where runs and the dataset go (default: a temporary folder)")
    parser.add_argument("--out", default=OUT)
    args = parser.parse_args()
    work = os.path.abspath(args.work or tempfile.mkdtemp(prefix="shoal-offline-"))
    os.makedirs(work, exist_ok=True)
    started = time.time()
    dqn_dir, dataset = os.path.join(work, "dqn"), os.path.join(work, "cartpole-dqn-medium-v0")
    env = ["--env", "CartPole-v1"]
    data_policy = shoal(
        "train", "--agent", "dqn", *env, "--seed", "0", "--target-return", str(args.data_target),
        "--eval-every", "1000", "--run-dir", dqn_dir, "--quiet",
    )  # fmt: skip
    recorded = shoal("record", dqn_dir, "--episodes", str(args.episodes), "--epsilon", "0.2", "--out", dataset)
    import minari  # (the offline extra)
    import numpy as np

    returns = [float(e.rewards.sum()) for e in minari.MinariDataset(os.path.join(dataset, "data")).iterate_episodes()]
    quantiles = [float(q) for q in np.quantile(returns, [0, 0.25, 0.5, 0.75, 1])]
    print(f"dataset: {recorded['steps']} steps, returns mean {np.mean(returns):.1f}, quantiles {quantiles}", flush=True)
    runs = []
    for agent in args.agents:
        for seed in args.seeds:
            run_dir = os.path.join(work, f"{agent}-s{seed}")
            overrides = [flag for value in args.set for flag in ("--set", value)]
            result = shoal(
                "train", "--agent", agent, *env, "--dataset", dataset, "--seed", str(seed), "--run-dir", run_dir,
                "--quiet", *overrides,
            )  # fmt: skip
            curve = evaluations(run_dir)
            runs.append(
                {
                    "agent": agent,
                    "seed": seed,
                    "solved": result["solved"],
                    "learner_steps": result["learner_steps"],
                    "final_eval_return": result["final_eval_return"],
                    "best_eval_return": max(point["return"] for point in curve),
                    "wall_s": result["wall_s"],
                    "evaluations": curve,
                }
            )
            print(json.dumps({k: v for k, v in runs[-1].items() if k != "evaluations"}), flush=True)
    record = {
        "benchmark": "offline RL on CartPole-v1 (issue 58)",
        "command": " ".join(["python", "benchmarks/offline.py", *sys.argv[1:]]),
        "python": platform.python_version(),
        "data_policy": {
            "agent": "dqn",
            "env_steps": data_policy["env_steps"],
            "eval_return": data_policy["final_eval_return"],
        },
        "dataset": {
            "episodes": recorded["episodes"],
            "steps": recorded["steps"],
            "epsilon": 0.2,
            "return_mean": float(np.mean(returns)),
            "return_quantiles": quantiles,
        },
        "settings": args.set,
        "runs": runs,
        "wall_s": round(time.time() - started, 1),
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(record, f, indent=1)
        f.write("\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
