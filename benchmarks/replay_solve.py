"""DQN on CartPole-v1 to its target, on each replay backend, over seeds: env steps and wall
seconds to solve, and the replay ratio the learner achieved.

    python benchmarks/replay_solve.py                       # seeds 0-9, every backend installed here
    python benchmarks/replay_solve.py --backends native --seeds 0 1 2 --out /tmp/solve.json

Each run is a fresh ``shoal train --agent dqn --env CartPole-v1 --seed S --replay B --quiet``
process (the one-process runner, DQN's ``classic`` preset, its 100k-step budget), started with
``nice -n 10`` (the machine may be shared), one at a time, seeds in order, the backends taking
turns per seed (so that a change of the machine's load falls on both). Each finished run is
appended to ``<out>.jsonl`` as it ends (the same command again resumes a half-done sweep; a run
there is not run again), and ``<out>`` gets the summary: per backend, the median and range of the
env steps and wall seconds to solve (over all runs: one that did not solve counts its budget),
and per run ``achieved_samples_per_insert``: transitions trained on (``learner_steps *
batch_size``) per transition inserted after the first ``min_replay_size`` (the rate limiter's
target is ``samples_per_insert``; its error buffer lets the learner start a few updates ahead).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys

from shoal.agents.dqn.config import DQNConfig

ENV = "CartPole-v1"
NUM_ENVS = 16  # (the classic-control family's, which DQN's classic preset keeps)


def installed_backends() -> list[str]:
    """``native``, and ``reverb`` where it is installed."""
    return ["native"] + (["reverb"] if importlib.util.find_spec("reverb") is not None else [])


def achieved_ratio(env_steps: int, learner_steps: int, config: DQNConfig, num_envs: int = NUM_ENVS) -> float:
    """Transitions trained on per transition inserted once ``min_replay_size`` were in (the n-step
    adder emits a vector step's transitions ``n_step - 1`` steps late)."""
    inserted = env_steps - (config.n_step - 1) * num_envs - config.min_replay_size
    return round(learner_steps * config.batch_size / max(inserted, 1), 2)


def run_one(backend: str, seed: int) -> dict:
    """One niced ``shoal train`` run; its result line, with the achieved replay ratio."""
    cmd = ["nice", "-n", "10", sys.executable, "-m", "shoal", "train", "--agent", "dqn", "--env", ENV]
    cmd += ["--seed", str(seed), "--replay", backend, "--quiet"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(
            f"replay_solve.py: {backend} seed {seed} failed (exit {proc.returncode}): {proc.stderr[-2000:]}"
        )
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    keep = ("seed", "solved", "env_steps", "wall_s", "process_s", "learner_steps", "final_eval_return")
    row = {"backend": backend, **{k: result.get(k) for k in keep}}
    row["achieved_samples_per_insert"] = achieved_ratio(result["env_steps"], result["learner_steps"], DQNConfig())
    return row


def summary(rows: list[dict]) -> dict:
    """Per backend: runs, solved, and the median [min, max] of env steps and wall seconds."""
    out: dict = {}
    for backend in sorted({r["backend"] for r in rows}):
        mine = sorted((r for r in rows if r["backend"] == backend), key=lambda r: r["seed"])
        figures = {"runs": len(mine), "solved": sum(bool(r["solved"]) for r in mine)}
        for key in ("env_steps", "wall_s", "process_s", "achieved_samples_per_insert"):
            values = [r[key] for r in mine if r.get(key) is not None]
            if values:
                figures[key] = {"median": statistics.median(values), "min": min(values), "max": max(values)}
        figures["per_seed"] = {r["seed"]: {"env_steps": r["env_steps"], "wall_s": r["wall_s"]} for r in mine}
        out[backend] = figures
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backends", nargs="+", choices=["native", "reverb"], default=None)
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(10)))
    version = f"py{sys.version_info.major}.{sys.version_info.minor}"
    parser.add_argument("--out", default=f"benchmarks/results/replay/dqn-solve-{version}.json")
    args = parser.parse_args()
    backends = args.backends or installed_backends()
    missing = [b for b in backends if b not in installed_backends()]
    if missing:
        parser.error(
            f"--backends {' '.join(missing)}: not installed here (installed: {', '.join(installed_backends())})"
        )
    log = args.out + "l" if args.out.endswith(".json") else args.out + ".jsonl"
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    rows = []
    if os.path.exists(log):
        with open(log) as f:
            rows = [json.loads(line) for line in f if line.strip()]
    done = {(r["backend"], r["seed"]) for r in rows}
    for seed in args.seeds:
        for backend in backends:
            if (backend, seed) in done:
                continue
            row = run_one(backend, seed)
            rows.append(row)
            with open(log, "a") as f:
                f.write(json.dumps(row) + "\n")
            print(json.dumps(row), flush=True)
    wanted = [r for r in rows if r["backend"] in backends and r["seed"] in args.seeds]
    record = {"python": version, "env": ENV, "agent": "dqn", "seeds": args.seeds, "backends": summary(wanted)}
    with open(args.out, "w") as f:
        json.dump(record, f, indent=1)
        f.write("\n")
    print(json.dumps(record["backends"], indent=1))


if __name__ == "__main__":
    main()
