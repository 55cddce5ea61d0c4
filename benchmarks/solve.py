"""Full solves: runs `shoal train` once per seed and prints its JSON line per seed, then a summary.

    python benchmarks/solve.py                       # dqn, CartPole-v1, seeds 0 1 2
    python benchmarks/solve.py --seeds 0 1 2 3 4 --out results/solve.json

Each seed runs in a fresh process, exactly as a user would run it (the timings are the CLI's
own `wall_s`, counted after imports). The summary line reports median wall seconds and env
steps; `--out` also writes all lines to a JSON file and a PNG of eval return vs wall time.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--agent", default="dqn")
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--max-env-steps", type=int, default=100_000)
    parser.add_argument("--runs-root", default="runs/bench-solve")
    parser.add_argument("--out", default=None, help="write results JSON (and a .png beside it)")
    parser.add_argument("extra", nargs=argparse.REMAINDER, help="passed on to `shoal train` after --")
    args = parser.parse_args()
    extra = [a for a in args.extra if a != "--"]

    results = []
    for seed in args.seeds:
        run_dir = os.path.join(args.runs_root, f"{args.agent}-{args.env}-s{seed}")
        cmd = [sys.executable, "-m", "shoal", "train", "--agent", args.agent, "--env",
               args.env, "--seed", str(seed), "--max-env-steps", str(args.max_env_steps),
               "--run-dir", run_dir, "--quiet", *extra]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(f"seed {seed} failed:\n{proc.stderr[-3000:]}")
        line = json.loads(proc.stdout.strip().splitlines()[-1])
        line["run_dir"] = run_dir
        print(json.dumps(line), flush=True)
        results.append(line)

    solved = [r for r in results if r["solved"]]
    summary = {"summary": True, "agent": args.agent, "env": args.env, "seeds": args.seeds,
               "solved": f"{len(solved)}/{len(results)}",
               "median_wall_s": statistics.median(r["wall_s"] for r in results),
               "median_env_steps": statistics.median(r["env_steps"] for r in results),
               "max_env_steps_to_solve": max((r["env_steps"] for r in solved), default=None)}
    print(json.dumps(summary), flush=True)
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump({"runs": results, "summary": summary}, f, indent=2)
        plot(results, os.path.splitext(args.out)[0] + ".png", f"{args.agent} on {args.env}")


def plot(results, path: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for r in results:
        with open(os.path.join(r["run_dir"], "eval.csv")) as f:
            rows = list(csv.DictReader(f))
        steps = [int(row["env_steps"]) for row in rows]
        wall = [float(row["wall_s"]) for row in rows]
        ret = [float(row["eval_return"]) for row in rows]
        axes[0].plot(steps, ret, marker=".", label=f"seed {r['seed']}")
        axes[1].plot(wall, ret, marker=".", label=f"seed {r['seed']}")
    for ax, xlabel in zip(axes, ("env steps", "wall seconds (incl. compile and evaluation)")):
        ax.set_xlabel(xlabel)
        ax.set_ylabel("mean greedy eval return (10 episodes)")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    main()
