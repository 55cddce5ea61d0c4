"""Offline RL on HalfCheetah-v5 (issue 58's Results row): SAC's replay as a dataset, IQL and CQL
trained offline on it, and SAC fine-tuned online from it.

1. ``shoal train --agent sac --env HalfCheetah-v5 --seed 0 --max-env-steps 300000
   --record-dataset DATASET``: every episode a learning SAC played (a "medium-replay"
   analogue; the ``sac/mujoco`` preset). Its evaluations are also SAC from scratch.

Every command runs as a user's does (the CLI, in a subprocess); a step whose outputs exist in
``--work`` is not run again (rerun the script to continue). The JSON goes to
``benchmarks/results/mujoco/halfcheetah-offline.json``::

    nice -n 10 python benchmarks/offline_halfcheetah.py [--work /tmp/shoal-offline-halfcheetah]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from offline import ROOT, shoal  # noqa: E402  (the CartPole benchmark's helpers)

OUT = os.path.join(ROOT, "benchmarks", "results", "mujoco", "halfcheetah-offline.json")
ENV = "HalfCheetah-v5"


def step(work: str, name: str, argv: list[str]) -> dict:
    """Runs ``shoal ARGV`` once: its JSON line, the command and its wall time go to WORK/NAME.json."""
    done = os.path.join(work, name + ".json")
    if os.path.exists(done):
        print(f"{name}: done before ({done})", flush=True)
        with open(done) as f:
            return json.load(f)
    print(f"{name}: shoal {' '.join(argv)}  [{time.strftime('%H:%M:%S')}]", flush=True)
    start = time.time()
    result = shoal(*argv)
    record = {"command": "shoal " + " ".join(argv), "wall_s": round(time.time() - start, 1), "result": result}
    with open(done + ".tmp", "w") as f:
        json.dump(record, f, indent=1)
    os.replace(done + ".tmp", done)
    print(f"{name}: done in {record['wall_s']} s: {json.dumps(result)}", flush=True)
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", default="/tmp/shoal-offline-halfcheetah", help="runs, the dataset, each step's JSON")
    parser.add_argument("--out", default=OUT)
    args = parser.parse_args()
    work = os.path.abspath(args.work)
    os.makedirs(work, exist_ok=True)
    dataset = os.path.join(work, "halfcheetah-sac-replay-v0")
    sac = os.path.join(work, "sac-scratch")
    step(work, "sac-scratch", [
        "train", "--agent", "sac", "--env", ENV, "--seed", "0", "--max-env-steps", "300000",
        "--record-dataset", dataset, "--run-dir", sac, "--eval-every", "10000", "--eval-episodes", "5",
        "--target-return", "100000", "--quiet",
    ])  # fmt: skip


if __name__ == "__main__":
    main()
