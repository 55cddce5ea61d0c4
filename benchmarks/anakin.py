"""Anakin PPO on ``gymnax:CartPole-v1`` against Shoal's replay-backed PPO on gymnasium's
``CartPole-v1``: training env steps/s and time to solve, each a whole ``shoal train`` process.

Two measurements per architecture, each ``shoal train --agent ppo`` with its defaults (16 envs,
rollouts of 32, 4 epochs x 4 minibatches; one process; the compilation cache off, so every
process compiles as a first run does):

* **throughput**: a fixed budget that never solves (``--target-return 1e9``); the figure is
  the median of ``train.csv``'s ``steps_per_s`` rows (env steps per second of training, rows
  after the first, so compilation is not in it), beside the whole process's
  ``env_steps / process_s``;
* **time to solve**: the default target (475, greedy evaluation every 2,000 env steps); the
  figure is the result's ``process_s`` (from the OS starting the process to its result line:
  imports and compilation included), and ``env_steps``, per seed: ``cold`` with the cache off
  (a first run), and ``warm`` from JAX's compilation cache as ``shoal train`` keeps it (a fresh
  cache directory, filled by one unmeasured run of each first: what every later run pays).

Needs gymnax (``pip install --no-deps "gymnax==1.0.1"``, docs/anakin.md)::

    python benchmarks/anakin.py --seeds 0 1 2 --out benchmarks/results/anakin.json
    python benchmarks/anakin.py --agent dqn --anakin-steps 50000 --replay-steps 20000 \
        --out benchmarks/results/anakin-dqn.json     # DQN: the device buffer against replay
    python benchmarks/anakin.py --agent sac --anakin-steps 30000 --replay-steps 15000 \
        --out benchmarks/results/anakin-sac.json     # SAC on Pendulum-v1, "solved" at a return of -200
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
from typing import Any

ENVS = {"anakin": "gymnax:CartPole-v1", "replay": "CartPole-v1"}
SAC_ENVS = {"anakin": "gymnax:Pendulum-v1", "replay": "Pendulum-v1"}  # (no reward_threshold: SOLVE_FLAGS' target)
SOLVE_FLAGS = {"sac": ["--target-return", "-200"]}  # (docs/benchmarks.md's target for Pendulum-v1)


def shoal_train(env: str, run_dir: str, *args: str, cache: str = "off", agent: str = "ppo") -> dict[str, Any]:
    """One ``shoal train`` process (``cache``: its compilation cache directory, or ``off``); its result line."""
    cmd = [sys.executable, "-m", "shoal", "train", "--agent", agent, "--env", env, "--quiet", "--run-dir", run_dir]
    env_vars = dict(os.environ, SHOAL_COMPILATION_CACHE=cache)
    proc = subprocess.run([*cmd, *args], capture_output=True, text=True, env=env_vars, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def steady_steps_per_s(run_dir: str) -> float:
    with open(os.path.join(run_dir, "train.csv"), newline="") as f:
        rates = [float(row["steps_per_s"]) for row in csv.DictReader(f) if row.get("steps_per_s")]
    return statistics.median(rates[1:] or rates)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument(
        "--agent", default="ppo", choices=["ppo", "dqn", "sac"], help="the agent both architectures train"
    )
    parser.add_argument("--anakin-steps", type=int, default=1_000_000, help="throughput budget, Anakin")
    parser.add_argument("--replay-steps", type=int, default=50_000, help="throughput budget, replay-backed")
    parser.add_argument("--out", default=None, help="write the JSON here too")
    args = parser.parse_args()
    budget = {"anakin": args.anakin_steps, "replay": args.replay_steps}
    envs, solve_flags = (SAC_ENVS if args.agent == "sac" else ENVS), SOLVE_FLAGS.get(args.agent, [])
    out: dict[str, Any] = {"throughput": {}, "time_to_solve": {}, "cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory() as tmp:
        for name, env in envs.items():
            run_dir = os.path.join(tmp, f"{name}-throughput")
            flags = ["--max-env-steps", str(budget[name]), "--target-return", "1e9", "--eval-every", "100000"]
            result = shoal_train(env, run_dir, *flags, agent=args.agent)
            out["throughput"][name] = {
                "env": env,
                "env_steps": result["env_steps"],
                "train_steps_per_s": round(steady_steps_per_s(run_dir)),
                "process_steps_per_s": round(result["env_steps"] / result["process_s"]),
                "process_s": result["process_s"],
            }
            print(json.dumps({name: out["throughput"][name]}), file=sys.stderr, flush=True)
        cache = os.path.join(tmp, "jax-cache")
        for name, env in envs.items():
            warm_up = os.path.join(tmp, f"{name}-warm-up")
            shoal_train(env, warm_up, *solve_flags, cache=cache, agent=args.agent)  # (fills the cache: not measured)
        for mode in ("cold", "warm"):
            out["time_to_solve"][mode] = {}
            for name, env in envs.items():
                runs = []
                for seed in args.seeds:
                    run_dir = os.path.join(tmp, f"{name}-solve-{mode}-{seed}")
                    result = shoal_train(
                        env,
                        run_dir,
                        "--seed",
                        str(seed),
                        *solve_flags,
                        cache="off" if mode == "cold" else cache,
                        agent=args.agent,
                    )
                    runs.append({k: result[k] for k in ("seed", "solved", "env_steps", "process_s", "wall_s")})
                    print(json.dumps({f"{name} ({mode})": runs[-1]}), file=sys.stderr, flush=True)
                out["time_to_solve"][mode][name] = {
                    "env": env,
                    "runs": runs,
                    "median_process_s": statistics.median(r["process_s"] for r in runs),
                }
    t, s = out["throughput"], out["time_to_solve"]
    out["train_speedup"] = round(t["anakin"]["train_steps_per_s"] / t["replay"]["train_steps_per_s"], 1)
    for mode in ("cold", "warm"):
        ratio = s[mode]["anakin"]["median_process_s"] / s[mode]["replay"]["median_process_s"]
        out[f"solve_time_ratio_{mode}"] = round(ratio, 3)
    text = json.dumps(out, indent=1)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
