"""MAPPO (PPO with ``--global-state``) or IPPO (``--ippo``: each agent's value reads its own
observation) on JaxMARL's ``MPE_simple_spread_v3`` in the compiled loop: seeds x settings, JSON
lines out, and the team return on the MAPPO paper's scale.

Each run is a fresh ``shoal train --agent ppo --env jaxmarl:MPE_simple_spread_v3 --global-state
--preset P --num-envs 128 --max-env-steps 3000000 --eval-every 500000 --eval-episodes 32 --seed S
[--set K=V ...]`` process, as a user runs it: 3M agent rows are 1M env steps of the 3-agent env
(DI-engine's budget). Its record, one JSON line appended to ``--out``, is the run's result line
plus ``label`` (the preset and its overrides), ``team_return`` (the last evaluation's
``eval_team_return``: the agents' returns summed, over 32 whole episodes) and ``mappo_scale`` (``2 x
team_return - 75``: the quantity the MAPPO paper's and DI-engine's Spread curves plot, on
PettingZoo's and JaxMARL's Spread, ``docs/benchmarks.md``). Resumable: a (label, seed) already
recorded is skipped::

    python benchmarks/mappo_spread.py --seeds 0 1 2 3 4                        # the preset (ppo/jaxmarl-mpe)
    python benchmarks/mappo_spread.py --preset none --seeds 0 1 2 3 4          # PPO's plain defaults
    python benchmarks/mappo_spread.py --ippo --seeds 0 1 2 3 4                 # IPPO, the same preset

An IPPO record's ``label`` starts with ``ippo`` (``ippo auto``); ``algorithm`` says which.

Needs JaxMARL (the jaxmarl extra, installed ``--no-deps``; docs/anakin.md).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
from typing import Any

DEFAULT_OUT = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "results", "multiagent", "mappo-spread-jaxmarl.jsonl"
)
ENV = "jaxmarl:MPE_simple_spread_v3"


def label_of(preset: str, overrides: list[str], ippo: bool) -> str:
    """What the records group by: ``[ippo] PRESET [KEY=VALUE ...]``."""
    return " ".join([*(["ippo"] if ippo else []), preset, *overrides])


def run_one(seed: int, preset: str, overrides: list[str], runs_dir: str, ippo: bool = False) -> dict[str, Any]:
    """One ``shoal train`` process; its result line with the team return."""
    label = label_of(preset, overrides, ippo)
    name = f"{label}-s{seed}".replace(" ", "-").replace("/", "_").replace("=", "_")
    run_dir = os.path.join(runs_dir, name)
    cmd = [
        *(sys.executable, "-m", "shoal", "train", "--agent", "ppo", "--env", ENV),
        *([] if ippo else ["--global-state"]),
        *("--preset", preset, "--num-envs", "128", "--max-env-steps", "3000000", "--eval-every", "500000"),
        *("--eval-episodes", "32", "--seed", str(seed), "--run-dir", run_dir, "--quiet"),
        *[arg for setting in overrides for arg in ("--set", setting)],
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        raise SystemExit(f"[mappo] seed {seed} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    with open(os.path.join(run_dir, "eval.csv"), newline="") as f:
        team = float(list(csv.DictReader(f))[-1]["eval_team_return"])
    algorithm = "ippo" if ippo else "mappo"
    return {
        **result,
        "label": label,
        "algorithm": algorithm,
        "team_return": team,
        "mappo_scale": 2 * team - 75,
        "run_dir": run_dir,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--preset", default="auto", help="the preset (default: the env family's)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--out", default=DEFAULT_OUT)
    parser.add_argument("--runs-dir", default="runs/mappo-spread")
    parser.add_argument("--ippo", action="store_true", help="IPPO: no --global-state (default: MAPPO)")
    args = parser.parse_args()
    label = label_of(args.preset, args.overrides, args.ippo)
    records = []
    if os.path.exists(args.out):
        with open(args.out) as f:
            records = [json.loads(line) for line in f if line.strip()]
    done = {(r["label"], r["seed"]) for r in records}
    for seed in args.seeds:
        if (label, seed) in done:
            continue
        record = run_one(seed, args.preset, args.overrides, args.runs_dir, args.ippo)
        with open(args.out, "a") as f:
            f.write(json.dumps(record) + "\n")
        records.append(record)
        print(
            f"[spread] {label} seed {seed}: team {record['team_return']:.2f} ({record['mappo_scale']:.1f})", flush=True
        )
    mine = [r for r in records if r["label"] == label]
    if mine:
        scale = [r["mappo_scale"] for r in mine]
        print(
            json.dumps(
                {
                    "label": label,
                    "seeds": [r["seed"] for r in mine],
                    "mappo_scale": scale,
                    "median": statistics.median(scale),
                }
            )
        )


if __name__ == "__main__":
    main()
