"""Learning benchmarks: `shoal train` for agent x env x seed, a markdown table and learning curves.

    python benchmarks/solve.py --agents dqn ppo --envs CartPole-v1 --seeds 0 1 2 --out results/solve
    python benchmarks/solve.py --suite box2d --out results/box2d     # a preset list of tasks
    python benchmarks/solve.py ... -- --launcher processes --num-actors 2   # more `shoal train` flags
    python benchmarks/solve.py --agents ppo "ppo lstm_size=0" --envs shoal/CartPoleNoVelocity-v1

An agent may carry settings after its name (``"ppo lstm_size=0"``: each a ``--set`` of its runs)
and `shoal train` flags (``"ppo --global-state"``, ``"ppo --agent-group=a*=red"``: a flag's
value after ``=``); the table and plots name it so, beside the
plain agent.

Each run is a fresh `shoal train` process, as a user runs it, with the preset of its env's
family (its budget too, unless --max-env-steps is given; its JSON line is the record). Into
``--out``: ``runs.jsonl`` (one line per run, appended as runs finish: run the same command again
to resume a half-done sweep; finished runs are kept), ``table.md`` (every run recorded in
``--out``, per agent and env: solved,
env steps and wall seconds as median [min-max], the final and the best eval return, the mean return of the
last 100 training episodes (what the MinAtar paper plots), env steps/s and where the time went), and ``<agent>-<env>.png`` (eval return against env steps and against wall
seconds, one line per seed, the target dashed); and ``compare/``, what ``shoal compare`` makes of
every evaluated run grouped by agent: its ``table.md`` (final return IQM and optimality gap with
stratified-bootstrap intervals, runs that reached the target and when) and per env one plot of
each agent's mean eval return with the range of its seeds.

Suites (target return; tasks without one run their budget and report their final return):
  cartpole -- DQN, PPO, IMPALA on CartPole-v1 (475)
  box2d    -- PPO, DQN on LunarLander-v3 (200; the box2d extra)
  mujoco   -- SAC, PPO on HalfCheetah-v5 and Hopper-v5 (the mujoco extra)
  atari    -- PPO, DQN, IMPALA on Pong and Breakout (the atari extra; give a budget: the presets'
              is the published 10M steps)
  minatar  -- DQN, PPO on MinAtar Breakout and SpaceInvaders (the minatar extra; the presets'
              budgets are the published 5M/10M steps: give one that fits)
  memory   -- recurrent PPO (the memory preset) beside feed-forward PPO (the same preset with
              lstm_size=0), and R2D2, on shoal/CartPoleNoVelocity-v1 (475) and three popgym tasks
              (RepeatPreviousEasy, CountRecallEasy, PositionOnlyCartPoleEasy; the popgym extra)
  full     -- cartpole, Acrobot-v1 (-100), Pendulum-v1 for SAC (-200), box2d and mujoco
  multiagent -- PettingZoo's MPE (the pettingzoo extra): simple_spread (3 agents) with PPO's policy
              shared and its critic each agent's own (IPPO) or centralised (--global-state:
              MAPPO); simple_adversary (agents of different spaces) with a policy per group;
              connect four by self-play (win rates against a random and a lookahead player in
              eval.csv). Env steps count rows (one per agent; the learner's moves in self-play);
              give a budget (default 100k)
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time

from shoal.core.files import json_text, open_append, write_output
from shoal.launch.experiments.cli.compare_plots import label_axes, pyplot

SPREAD = "pettingzoo:mpe2.simple_spread_v3"
POPGYM = ("popgym-RepeatPreviousEasy-v0", "popgym-CountRecallEasy-v0", "popgym-PositionOnlyCartPoleEasy-v0")
TARGETS = {
    "CartPole-v1": 475.0,
    "shoal/CartPoleNoVelocity-v1": 475.0,
    "Acrobot-v1": -100.0,
    "LunarLander-v3": 200.0,
    "Pendulum-v1": -200.0,
}
SUITES = {
    "cartpole": [(a, "CartPole-v1") for a in ("dqn", "ppo", "impala")],
    "box2d": [(a, "LunarLander-v3") for a in ("ppo", "dqn")],
    "mujoco": [(a, e) for a in ("sac", "ppo") for e in ("HalfCheetah-v5", "Hopper-v5")],
    "atari": [(a, e) for a in ("ppo", "dqn", "impala") for e in ("ALE/Pong-v5", "ALE/Breakout-v5")],
    "minatar": [(a, e) for a in ("dqn", "ppo") for e in ("MinAtar/Breakout-v1", "MinAtar/SpaceInvaders-v1")],
    "memory": [(a, e) for e in ("shoal/CartPoleNoVelocity-v1", *POPGYM) for a in ("ppo", "ppo lstm_size=0", "r2d2")],
    "multiagent": [(a, SPREAD) for a in ("ppo", "ppo --global-state")]
    + [
        ("ppo --agent-group=adversary_*=red --agent-group=agent_*=blue", "pettingzoo:mpe2.simple_adversary_v3"),
        ("ppo --self-play", "pettingzoo:pettingzoo.classic.connect_four_v3"),
    ],
}
SUITES["full"] = (
    SUITES["cartpole"]
    + [(a, "Acrobot-v1") for a in ("dqn", "ppo", "impala")]
    + [("sac", "Pendulum-v1")]
    + SUITES["box2d"]
    + SUITES["mujoco"]
)


def run_one(label: str, env: str, seed: int, root: str, max_env_steps: int | None, extra: list[str]) -> dict:
    """One ``shoal train`` run of ``label`` (an agent, then any settings: ``"ppo lstm_size=0"``)."""
    agent, *settings = label.split()
    flags = [s for s in settings if s.startswith("--")]  # (a `shoal train` flag: "ppo --global-state")
    settings = [s for s in settings if not s.startswith("--")]
    name = "-".join([agent, *(f.lstrip("-").replace("*", "").replace("=", "_") for f in flags), *settings])
    run_dir = os.path.join(root, "runs", f"{name}-{env.replace('/', '_').replace(':', '_')}-s{seed}")
    shutil.rmtree(run_dir, ignore_errors=True)  # a run the last sweep did not finish starts over
    target = TARGETS.get(env)
    budget = ["--max-env-steps", str(max_env_steps)] if max_env_steps else []
    cmd = [
        sys.executable,
        "-m",
        "shoal",
        "train",
        "--agent",
        agent,
        "--env",
        env,
        "--seed",
        str(seed),
        *budget,
        "--run-dir",
        run_dir,
        "--quiet",
        "--target-return",
        str(target if target is not None else 1e12),
        *extra,
        *flags,
        *[arg for setting in settings for arg in ("--set", setting)],
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{agent} {env} seed {seed} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    return {**result, "agent": label, "run_dir": run_dir, "target": target}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--agents", nargs="+", default=None, help="default: dqn (or the suite's)")
    parser.add_argument("--envs", nargs="+", default=None, help="default: CartPole-v1 (or the suite's)")
    parser.add_argument("--suite", choices=sorted(SUITES), default=None, help="a preset list of agent x env")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--max-env-steps", type=int, default=None, help="default: the preset's budget")
    parser.add_argument("--out", default="results/solve")
    parser.add_argument("extra", nargs=argparse.REMAINDER, help="after --: passed on to `shoal train`")
    args = parser.parse_args()
    if args.suite and (args.agents or args.envs):
        parser.error("--suite picks the agents and envs; drop --agents/--envs")
    try:  # (the figures' matplotlib, the plots extra: missing, said before hours of runs, not after)
        pyplot("benchmarks/solve.py's figures")
    except RuntimeError as e:
        raise SystemExit(f"solve.py: error: {e}") from None
    tasks = (
        SUITES[args.suite]
        if args.suite
        else [(a, e) for a in args.agents or ["dqn"] for e in args.envs or ["CartPole-v1"]]
    )
    extra = [a for a in args.extra if a != "--"]
    os.makedirs(args.out, exist_ok=True)
    log_path = os.path.join(args.out, "runs.jsonl")
    done = {(r["agent"], r["env"], r["seed"]): r for r in read_runs(log_path)}
    todo = [(a, e, s) for a, e in tasks for s in args.seeds if (a, e, s) not in done]
    print(
        f"[solve] {len(tasks) * len(args.seeds)} runs, {len(todo)} to go ({len(done)} already in {log_path})",
        file=sys.stderr,
        flush=True,
    )
    started = time.monotonic()
    for i, (agent, env, seed) in enumerate(todo, 1):
        result = run_one(agent, env, seed, args.out, args.max_env_steps, extra)
        with open_append(log_path) as f:  # (never through a link)
            f.write(json_text(result, log_path) + "\n")
        done[(agent, env, seed)] = result
        print(
            f"[solve] {i}/{len(todo)} {agent} {env} seed {seed}: "
            f"{'solved' if result['solved'] else 'not solved'} at {result['env_steps']:,} env steps, "
            f"{result['wall_s']:.1f} s (sweep {time.monotonic() - started:.0f} s)",
            file=sys.stderr,
            flush=True,
        )
    runs = list(done.values())  # (the table and plots hold every run recorded in --out)
    table = markdown_table(runs)
    write_output(os.path.join(args.out, "table.md"), table)
    for agent, env in groups(runs):
        plot(
            [r for r in runs if r["agent"] == agent and r["env"] == env],
            os.path.join(args.out, f"{_file_name(agent)}-{_file_name(env)}.png"),
            f"{agent} on {env}",
            TARGETS.get(env),
        )
    evaluated = {r["run_dir"]: r["agent"] for r in runs if not math.isnan(best_eval_return(r["run_dir"]))}
    if evaluated:  # (shoal compare: IQM and optimality gap with bootstrap intervals, mean curves per agent)
        from shoal.launch.experiments.cli.compare import compare
        from shoal.launch.experiments.cli.compare import markdown_table as compare_table

        table += "\n" + compare_table(compare(list(evaluated), out=os.path.join(args.out, "compare"), labels=evaluated))
        # (compare/table.md holds this second table; table.md the first)
    print(table, file=sys.stderr)
    for key, group in groups(runs).items():
        print(json_text(summary(key, group)), flush=True)


def _file_name(label: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in label.replace(" --", "-").replace(" ", "-"))


def read_runs(path: str) -> list[dict]:
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def groups(runs: list[dict]) -> dict[tuple[str, str], list[dict]]:
    out: dict[tuple[str, str], list[dict]] = {}
    for r in runs:
        out.setdefault((r["agent"], r["env"]), []).append(r)
    return out


def summary(key: tuple[str, str], runs: list[dict]) -> dict:
    solved = [r for r in runs if r["solved"]]
    return {
        "agent": key[0],
        "env": key[1],
        "seeds": [r["seed"] for r in runs],
        "solved": f"{len(solved)}/{len(runs)}",
        "median_env_steps": statistics.median(r["env_steps"] for r in runs),
        "median_wall_s": statistics.median(r["wall_s"] for r in runs),
        "median_final_return": statistics.median(r["final_eval_return"] for r in runs),
        "time_breakdown": median_breakdown(runs),
    }


def median_breakdown(runs: list[dict]) -> dict[str, float]:
    """The median, over runs, of each component's share of wall time (all nodes' shares summed
    per component for distributed runs, so a share can exceed 1 there)."""
    per_run = []
    for r in runs:
        shares: dict[str, float] = {}
        for node in (r.get("time_breakdown") or {}).values():
            for component, share in node.items():
                shares[component] = shares.get(component, 0.0) + share
        per_run.append(shares)
    components = sorted({c for shares in per_run for c in shares})
    return {c: round(statistics.median(s.get(c, 0.0) for s in per_run), 3) for c in components}


def _range(values: list[float], fmt: str) -> str:
    return f"{statistics.median(values):{fmt}} [{min(values):{fmt}}–{max(values):{fmt}}]"


def markdown_table(runs: list[dict]) -> str:
    lines = [
        "| agent | env | target | solved | env steps, median [range] | wall s, median [range] "
        "| final eval return | best eval return | last 100 training episodes | env steps/s | time: largest shares |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (agent, env), group in groups(runs).items():
        s = summary((agent, env), group)
        top = sorted(((v, k) for k, v in s["time_breakdown"].items()), reverse=True)[:3]
        target = group[0]["target"]
        lines.append(
            f"| {agent} | {env} | {target if target is not None else 'fixed budget'} | {s['solved'] if target is not None else '—'} | "
            f"{_range([r['env_steps'] for r in group], ',.0f')} | "
            f"{_range([r['wall_s'] for r in group], '.1f')} | "
            f"{_range([r['final_eval_return'] for r in group], '.4g')} | "
            f"{_range([best_eval_return(r['run_dir']) for r in group], '.4g')} | "
            f"{_range([training_return(r['run_dir']) for r in group], '.4g')} | "
            f"{statistics.median(r['env_steps'] / max(r['train_s'], 1e-9) for r in group):,.0f} | "
            f"{', '.join(f'{k} {v:.0%}' for v, k in top)} |"
        )
    return "\n".join(lines) + "\n"


def best_eval_return(run_dir: str) -> float:
    """The best mean return of the run's evaluations (``eval.csv``; popgym's MMER takes the best
    mean of training episodes instead); NaN without any."""
    try:
        with open(os.path.join(run_dir, "eval.csv")) as f:
            returns = [float(row["eval_return"]) for row in csv.DictReader(f) if row["eval_return"] not in ("", "nan")]
    except FileNotFoundError:
        return float("nan")
    return max(returns, default=float("nan"))


def training_return(run_dir: str, episodes: int = 100) -> float:
    """The mean return of about the last ``episodes`` training episodes, from the run's
    ``train.csv`` (each row: the mean return and length of the episodes that ended since the
    row before, so a row weighs ``env steps since the row before / episode length`` episodes);
    NaN without one."""
    path = os.path.join(run_dir, "train.csv")
    if not os.path.exists(path):
        return float("nan")
    with open(path) as f:
        rows = list(csv.DictReader(f))
    total = weight = 0.0
    for row, before in zip(reversed(rows), [*reversed(rows[:-1]), None]):
        if weight >= episodes:
            break
        ret, length = float(row.get("episode_return") or "nan"), float(row.get("episode_length") or "nan")
        if ret != ret or not length > 0:  # (no episode ended in this row)
            continue
        steps = float(row["env_steps"]) - (float(before["env_steps"]) if before else 0.0)
        n = max(steps / length, 1.0)
        total, weight = total + n * ret, weight + n
    return total / weight if weight else float("nan")


def plot(runs: list[dict], path: str, title: str, target: float | None) -> None:
    plt = pyplot("benchmarks/solve.py's figures")
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.2))
    for r in runs:
        try:
            with open(os.path.join(r["run_dir"], "eval.csv")) as f:
                rows = list(csv.DictReader(f))
        except FileNotFoundError:  # (a run recorded in runs.jsonl whose directory was removed)
            print(f"[solve] no {r['run_dir']}/eval.csv: seed {r['seed']} left out of {path}", file=sys.stderr)
            continue
        returns = [float(row["eval_return"]) for row in rows]
        axes[0].plot([int(row["env_steps"]) for row in rows], returns, marker=".", label=f"seed {r['seed']}")
        axes[1].plot([float(row["wall_s"]) for row in rows], returns, marker=".", label=f"seed {r['seed']}")
    label_axes(axes, target, "mean greedy eval return", "wall seconds (incl. compile and evaluation)")
    fig.suptitle(title)
    fig.tight_layout()
    image = io.BytesIO()
    fig.savefig(image, format="png", dpi=72)
    plt.close(fig)
    write_output(path, image.getvalue())


if __name__ == "__main__":
    main()
