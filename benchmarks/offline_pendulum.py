"""Offline RL on Pendulum-v1 (continuous actions): a dataset of a partly trained SAC's sampled
actions, and the offline agents ``cql`` (on SAC's loss seam), ``iql`` and ``bc`` trained on it.

1. ``shoal train --agent sac --env Pendulum-v1 --seed 0 --max-env-steps 4000``: a partly
   trained SAC.
2. ``shoal record RUN --episodes 50 --sample``: 10,000 steps of its stochastic policy (a
   Minari dataset; its returns' mean and quantiles are reported).
3. ``shoal train --agent cql|iql|bc --dataset DATASET --seed S --max-env-steps STEPS
   --eval-every 2000 --target-return 100000`` (each agent's ``classic`` preset otherwise).

Every command runs as a user's does (the CLI, in a subprocess); the JSON goes to
``benchmarks/results/classic/pendulum-offline.json``::

    nice -n 10 python benchmarks/offline_pendulum.py [--seeds 0] [--agents cql iql bc] [--steps 20000]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from offline import ROOT, evaluations, shoal  # noqa: E402  (the CartPole benchmark's helpers)

OUT = os.path.join(ROOT, "benchmarks", "results", "classic", "pendulum-offline.json")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--agents", nargs="+", default=["cql", "iql", "bc"])
    parser.add_argument("--steps", type=int, default=20_000, help="SGD steps of each offline run")
    parser.add_argument("--set", action="append", default=[], help="AGENT:KEY=VALUE for one offline agent")
    parser.add_argument("--work", default=None, help="where runs and the dataset go (default: a temporary folder)")
    parser.add_argument("--out", default=OUT)
    args = parser.parse_args()
    work = args.work or tempfile.mkdtemp(prefix="shoal-offline-pendulum-")
    dataset = os.path.join(work, "pendulum-sac-v0")
    sac_run = os.path.join(work, "sac")
    if not os.path.exists(dataset):
        shoal("train", "--agent", "sac", "--env", "Pendulum-v1", "--seed", "0", "--max-env-steps", "4000",
              "--run-dir", sac_run, "--quiet")  # fmt: skip
        shoal("record", sac_run, "--episodes", "50", "--sample", "--out", dataset)
    results: dict = {"env": "Pendulum-v1", "python": platform.python_version(), "steps": args.steps, "runs": []}
    for agent in args.agents:
        sets = [s.split(":", 1)[1] for s in args.set if s.startswith(agent + ":")]
        for seed in args.seeds:
            run = os.path.join(work, f"{agent}-{seed}")
            start = time.time()
            result = shoal(
                "train", "--agent", agent, "--env", "Pendulum-v1", "--dataset", dataset, "--seed", str(seed),
                "--run-dir", run, "--max-env-steps", str(args.steps), "--eval-every", "2000",
                "--target-return", "100000", "--quiet", *[f for s in sets for f in ("--set", s)],
            )  # fmt: skip
            returns = [e["return"] for e in evaluations(run)]
            results["dataset"] = result["dataset"]
            results["runs"].append(
                {"agent": agent, "seed": seed, "settings": sets, "best": max(returns), "last": returns[-1],
                 "evaluations": evaluations(run), "wall_s": round(time.time() - start, 1)}
            )  # fmt: skip
            print(json.dumps(results["runs"][-1]), flush=True)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
