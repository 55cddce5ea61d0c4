"""Presets on gymnax's five MinAtar games in the compiled loop: games x seeds, JSON lines out.

Each run is a fresh ``shoal train --agent A --env gymnax:<Game>-MinAtar --preset A/P --max-env-steps B
--seed S [--set K=V ...]`` process (``--launcher anakin``, the default for a gymnax env), as a user
runs it. Its record, one JSON line appended to ``--out`` as it finishes, is the run's result line
plus ``game``, ``preset``, ``overrides``, ``label`` (the preset and its overrides: what the tables
group by), ``final_eval_return`` (the greedy policy at the budget: ``eval_episodes`` episodes),
``training_return`` (the mean return of about the last 100 training episodes, actions sampled
from the policy: the figure gymnax-blines logs) and ``run_dir``. Resumable: a (label, game, seed)
already recorded in ``--out`` is skipped, so the same command run again finishes a grid::

    python benchmarks/minatar_presets.py --seeds 0 1 2 3 4                      # the preset, 5 games
    python benchmarks/minatar_presets.py --games Breakout --set entropy_coef=0.02  # one change
    python benchmarks/minatar_presets.py --preset dqn/minatar --max-env-steps 1000000  # DQN (dqn-presets.jsonl)

``benchmarks/published_tables.py`` turns the records into ``published.md``'s MinAtar rows.
Needs gymnax (docs/anakin.md); Python 3.12 with JAX 0.12 is the faster stack.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from solve import training_return  # noqa: E402  (benchmarks/ is scripts, not a package)

GAMES = ("Breakout", "SpaceInvaders", "Freeway", "Asterix", "Seaquest")
RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "minatar")


def default_out(agent: str) -> str:
    """Each agent's records apart (its table has its own reference): ``presets.jsonl`` for PPO,
    ``<agent>-presets.jsonl`` for another."""
    return os.path.join(RESULTS, "presets.jsonl" if agent == "ppo" else f"{agent}-presets.jsonl")


def label_of(preset: str, overrides: list[str]) -> str:
    """What the records group by: the preset, then its overrides (``ppo/gymnax-minatar entropy_coef=0.02``)."""
    return " ".join([preset, *overrides])


def read_records(path: str) -> list[dict[str, Any]]:
    """The records in ``path`` (none when it does not exist)."""
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def run_one(game: str, seed: int, preset: str, overrides: list[str], budget: int, runs_dir: str) -> dict[str, Any]:
    """One ``shoal train`` process; its result line with the fields the tables need."""
    env = f"gymnax:{game}-MinAtar"
    label = label_of(preset, overrides)
    name = "-".join([preset.replace("/", "_"), *overrides, game, f"s{seed}"]).replace("=", "_")
    run_dir = os.path.join(runs_dir, name)
    cmd = [
        *(sys.executable, "-m", "shoal", "train", "--agent", preset.split("/")[0], "--env", env, "--preset", preset),
        *("--max-env-steps", str(budget), "--seed", str(seed), "--target-return", "1e12"),
        *("--run-dir", run_dir, "--quiet"),
        *[arg for setting in overrides for arg in ("--set", setting)],
    ]
    if os.path.exists(run_dir):  # (a run the last grid did not finish starts over)
        import shutil

        shutil.rmtree(run_dir)
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{label} {game} seed {seed} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    return {
        **result,
        "game": game,
        "preset": preset,
        "overrides": overrides,
        "label": label,
        "training_return": training_return(run_dir),
        "run_dir": run_dir,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--games", nargs="+", default=list(GAMES), choices=GAMES)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--preset", default="ppo/gymnax-minatar", help="AGENT/PRESET (default: %(default)s)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--max-env-steps", type=int, default=1_280_000)
    parser.add_argument("--out", default=None, help="the JSON lines (default: results/minatar/presets.jsonl for PPO)")
    parser.add_argument("--runs-dir", default="runs/minatar-presets", help="the runs' directories")
    args = parser.parse_args()
    if "/" not in args.preset:
        parser.error(f"--preset {args.preset!r}: expected AGENT/PRESET, e.g. ppo/gymnax-minatar or dqn/minatar")
    args.out = args.out or default_out(args.preset.split("/")[0])
    for setting in args.overrides:
        if "=" not in setting:
            parser.error(f"--set {setting!r}: expected KEY=VALUE")
    label = label_of(args.preset, args.overrides)
    done = {(r["label"], r["game"], r["seed"]) for r in read_records(args.out)}
    todo = [(g, s) for g in args.games for s in args.seeds if (label, g, s) not in done]
    print(f"[minatar] {label}: {len(todo)} runs to go, {len(done)} recorded in {args.out}", file=sys.stderr)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    for i, (game, seed) in enumerate(todo, 1):
        started = time.monotonic()
        record = run_one(game, seed, args.preset, args.overrides, args.max_env_steps, args.runs_dir)
        with open(args.out, "a") as f:
            f.write(json.dumps(record) + "\n")
        print(
            f"[minatar] {i}/{len(todo)} {game} seed {seed}: greedy {record['final_eval_return']:.2f}, "
            f"training {record['training_return']:.2f} ({time.monotonic() - started:.0f} s)",
            file=sys.stderr,
            flush=True,
        )


if __name__ == "__main__":
    main()
