"""Regenerate the generated tables of ``benchmarks/results/published.md`` from the recorded runs.

Each generated table sits between two markers in the page::

    <!-- generated:NAME start -->
    ...rewritten by this script...
    <!-- generated:NAME end -->

and comes from one JSON-lines file of records under ``benchmarks/results/`` (see ``SECTIONS``).
Text outside the markers is never touched. One command rewrites them all::

    python benchmarks/published_tables.py            # rewrite published.md's generated tables
    python benchmarks/published_tables.py --check    # exit 1 if one is out of date (CI, reviews)

``minatar-ppo``: ``benchmarks/results/minatar/presets.jsonl``, written by
``benchmarks/minatar_presets.py`` (PPO presets on gymnax's MinAtar games, the compiled loop).
``minatar-ppo-10m``: ``benchmarks/results/minatar/presets-10m.jsonl``, the same script at 10M env
steps (``--max-env-steps 10000000 --out ...``).
``minatar-dqn``: ``benchmarks/results/minatar/dqn-presets.jsonl``, the same script with ``--preset
dqn/minatar --max-env-steps 1000000`` (the MinAtar paper's DQN).
``mujoco-sac``: ``benchmarks/results/mujoco/runs-sac-*.jsonl``, ``benchmarks/solve.py``'s records of
SAC on MuJoCo (each run's ``OUT/runs.jsonl``, copied there).
``mappo-spread``: ``benchmarks/results/multiagent/mappo-spread-jaxmarl.jsonl``, written by
``benchmarks/mappo_spread.py`` (MAPPO and IPPO on JaxMARL's simple_spread).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import sys
from collections.abc import Callable
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
DOC = os.path.join(HERE, "results", "published.md")
RESULTS = os.path.join(HERE, "results")

# gymnax-blines' PPO (RobertTLange/gymnax-blines, agents/<Game>-MinAtar/ppo.yaml): the return its
# training logged at 1.28M env steps (actions sampled from the policy; one seed), as published.md's
# MinAtar rows cite it. Seaquest has a ppo.yaml there but no logged run (no ppo.pkl).
GYMNAX_BLINES_1_28M: dict[str, tuple[float | None, str]] = {
    "Breakout": (15.7, "gymnax-blines `agents/Breakout-MinAtar/ppo.yaml` run: training return logged at 1.28M"),
    "SpaceInvaders": (58.4, "gymnax-blines `agents/SpaceInvaders-MinAtar/ppo.yaml` run, as for Breakout"),
    "Freeway": (30.25, "gymnax-blines `agents/Freeway-MinAtar/ppo.pkl`: training return logged at 1,279,936 steps"),
    "Asterix": (2.14, "gymnax-blines `agents/Asterix-MinAtar/ppo.pkl`: training return logged at 1,279,936 steps"),
    "Seaquest": (None, "none: gymnax-blines has a Seaquest `ppo.yaml` but no logged run"),
}
# The same runs' last logged return (at 9,919,936 env steps of their 10M: the mean over the episodes
# of that log window, actions sampled). pgx's MinAtar PPO example (sotetsuk/pgx,
# examples/minatar-ppo) trains 20M steps and publishes plots only, so it is no reference at 10M.
GYMNAX_BLINES_10M: dict[str, tuple[float | None, str]] = {
    "Breakout": (22.88, "gymnax-blines `agents/Breakout-MinAtar/ppo.pkl`: training return logged at 9,919,936 steps"),
    "SpaceInvaders": (131.64, "gymnax-blines `agents/SpaceInvaders-MinAtar/ppo.pkl`, as for Breakout"),
    "Freeway": (58.80, "gymnax-blines `agents/Freeway-MinAtar/ppo.pkl`, as for Breakout"),
    "Asterix": (14.95, "gymnax-blines `agents/Asterix-MinAtar/ppo.pkl`, as for Breakout"),
    "Seaquest": (
        None,
        "none at 10M: gymnax-blines logged no Seaquest run; pgx's MinAtar PPO plots ~54 at 20M (its own env, sticky actions)",
    ),
}
# The MinAtar paper's DQN (Young & Tian, 2019; kenjyoung/MinAtar's README, its learning-curve figure
# img/learning_curves.gif): the training return (a 100-episode moving average, 30 runs, all six
# actions, sticky actions 0.1) read off the figure at 1M frames (= env steps: no frame skip), to
# about +-0.3 (+-1 for SpaceInvaders; Asterix sits on a steep rise there, +-3). The paper trains 5M.
YOUNG_TIAN_DQN = "the MinAtar paper's DQN (Young & Tian, 2019), README figure `img/learning_curves.gif`"
YOUNG_TIAN_DQN_1M: dict[str, tuple[float | None, str]] = {
    "Breakout": (9.2, f"{YOUNG_TIAN_DQN}, read off at 1M (the paper: 10.0 at 5M)"),
    "SpaceInvaders": (32.5, f"{YOUNG_TIAN_DQN}, read off at 1M (43.2 at 5M)"),
    "Freeway": (47.8, f"{YOUNG_TIAN_DQN}, read off at 1M (50.2 at 5M)"),
    "Asterix": (7.0, f"{YOUNG_TIAN_DQN}, read off at 1M on a steep rise, +-3 (17.2 at 5M)"),
    "Seaquest": (1.0, f"{YOUNG_TIAN_DQN}, read off at 1M (20.4 at 5M; MinAtar's Seaquest before its 1.0.11 fix)"),
}
GAMES = tuple(GYMNAX_BLINES_1_28M)

# SAC on MuJoCo: Tianshou's MuJoCo benchmark (thu-ml/tianshou, 2021, since removed from the tree),
# examples/mujoco/benchmark/<Env>-v3/sac/test_rew_10seeds.csv, the 300,000 row: mean and std over 10
# seeds of a deterministic evaluation of 10 episodes (256x256 networks, a fixed temperature 0.2,
# 10k random steps; -v3 envs), as Shoal's final greedy evaluation is. At 1M: CleanRL's
# sac_continuous_action.py docs, "Experiment results" (-v2 envs, training return, 3 seeds).
TIANSHOU_SAC = "Tianshou's MuJoCo benchmark, `examples/mujoco/benchmark/{env}-v3/sac/test_rew_10seeds.csv`"
SAC_MUJOCO_REFERENCES: dict[tuple[str, int], tuple[float, float, str]] = {
    ("HalfCheetah-v5", 300_000): (9059.3, 1051.4, TIANSHOU_SAC.format(env="HalfCheetah") + ", the 300,000 row"),
    ("Hopper-v5", 300_000): (3387.7, 114.6, TIANSHOU_SAC.format(env="Hopper") + ", the 300,000 row"),
    ("Walker2d-v5", 300_000): (3386.8, 1182.0, TIANSHOU_SAC.format(env="Walker2d") + ", the 300,000 row"),
    ("Hopper-v5", 1_000_000): (2310.46, 342.82, "CleanRL `sac_continuous_action.py` docs (Hopper-v2, training return)"),
    ("Walker2d-v5", 1_000_000): (
        3591.45,
        911.33,
        "CleanRL `sac_continuous_action.py` docs (Walker2d-v2, training return)",
    ),
}
MUJOCO_ENVS = ("HalfCheetah-v5", "Hopper-v5", "Walker2d-v5")

# MAPPO on simple_spread: DI-engine's MAPPO on PettingZoo's Spread at 1M env steps, read off its
# docs' simple_spread.png, on the MAPPO paper's scale (2 x team return - 75).
DI_ENGINE_SPREAD_1M = (
    -133.0,
    "DI-engine's MAPPO on PettingZoo's Spread, its docs' `simple_spread.png` (read off the plot)",
)
# benchmarks/mappo_spread.py's labels, in the table's words and order
MAPPO_SPREAD_LABELS: dict[str, str] = {
    "none": "PPO's plain defaults (`--preset none`)",
    "auto": "`ppo/jaxmarl-mpe` (the tuned preset)",
    "ippo auto": (
        "IPPO: `ppo/jaxmarl-mpe` without `--global-state` (each agent's value reads its own observation; Python 3.12)"
    ),
}


def read_records(path: str) -> list[dict[str, Any]]:
    """The JSON lines in ``path`` (none when it does not exist)."""
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def median_range(values: list[float], fmt: str = ".2f") -> str:
    """``median [min-max]`` of ``values`` (the one value alone)."""
    if len(values) == 1:
        return f"{values[0]:{fmt}}"
    between = ", " if min(values) < 0 else "-"  # (-61.9, -48.0: not -61.9--48.0)
    return f"{statistics.median(values):{fmt}} [{min(values):{fmt}}{between}{max(values):{fmt}}]"


def seeds_text(seeds: list[int]) -> str:
    """``0-4`` for consecutive seeds, else the list."""
    seeds = sorted(seeds)
    if len(seeds) > 1 and seeds == list(range(seeds[0], seeds[-1] + 1)):
        return f"{seeds[0]}-{seeds[-1]}"
    return ", ".join(map(str, seeds))


def minatar_ppo_table(records: list[dict[str, Any]]) -> str:
    """One row per (preset and overrides, game): final greedy eval and training return over seeds,
    beside gymnax-blines' figure at 1.28M."""
    return minatar_table(records, GYMNAX_BLINES_1_28M, "1.28M")


def minatar_ppo_10m_table(records: list[dict[str, Any]]) -> str:
    """As ``minatar_ppo_table``, at 10M env steps, beside gymnax-blines' figure at 10M."""
    return minatar_table(records, GYMNAX_BLINES_10M, "10M")


def minatar_dqn_table(records: list[dict[str, Any]]) -> str:
    """As ``minatar_ppo_table`` for DQN at 1M env steps, beside the MinAtar paper's DQN at 1M."""
    return minatar_table(
        records, YOUNG_TIAN_DQN_1M, "1M", "the MinAtar paper's DQN", "final eval (ε = 0.01, 10 episodes)"
    )


def minatar_table(
    records: list[dict[str, Any]],
    references: dict[str, tuple[float | None, str]],
    budget: str,
    reference_name: str = "gymnax-blines",
    evaluation: str = "final greedy eval (10 episodes)",
) -> str:
    """One row per (preset and overrides, game) of ``records`` beside ``references[game]`` (the
    figure and its source, ``reference_name``'s) at ``budget``; ``evaluation`` names the
    records' ``final_eval_return``."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in records:
        groups.setdefault((r["label"], r["game"]), []).append(r)
    # (a preset's own row first, then its overrides')
    labels = sorted(dict.fromkeys(r["label"] for r in records), key=lambda label: " " in label)
    lines = [
        f"| game | preset (`--preset`, then `--set` overrides) | env steps | seeds | {evaluation}, "
        "median [range] | training return at the budget, median [range] | training return per seed | "
        f"{reference_name} at {budget} | source | training median against it |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    if not records:
        lines.append("| (no records yet) | | | | | | | | | |")
    for game in GAMES:
        reference, source = references[game]
        for label in labels:
            group = sorted(groups.get((label, game), []), key=lambda r: r["seed"])
            if not group:
                continue
            training = [float(r["training_return"]) for r in group]
            steps = statistics.median(r["env_steps"] for r in group)
            if reference is None:
                verdict = "—"
            else:
                gap = statistics.median(training) / reference - 1
                verdict = f"{'at or above' if gap >= 0 else 'below'} ({gap:+.0%})"
            lines.append(
                f"| {game} | `{label}` | {steps / 1e6:.2f}M | {seeds_text([r['seed'] for r in group])} | "
                f"{median_range([float(r['final_eval_return']) for r in group])} | {median_range(training)} | "
                f"{', '.join(f'{v:.1f}' for v in training)} | "
                f"{'—' if reference is None else reference} | {source} | {verdict} |"
            )
    return "\n".join(lines) + "\n"


def steps_text(steps: int) -> str:
    """``300k``, ``1M``: a budget in env steps."""
    return f"{steps / 1e6:g}M" if steps >= 1_000_000 else f"{steps / 1e3:g}k"


def against(value: float, reference: float) -> str:
    """``at or above (+x%)`` or ``below (-x%)``: ``value`` against ``reference`` (higher is better,
    negative returns too: the gap is a fraction of ``|reference|``)."""
    gap = (value - reference) / abs(reference)
    return f"{'at or above' if gap >= 0 else 'below'} ({gap:+.0%})"


def mujoco_sac_table(records: list[dict[str, Any]]) -> str:
    """One row per (agent and settings, env, budget) of ``benchmarks/solve.py``'s SAC records: the
    final greedy evaluation over seeds beside the published figure at the same budget."""
    groups: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    seen: set[tuple[str, str, int, int]] = set()
    for r in records:
        if r["agent"].split()[0] != "sac":  # (solve.py records every agent of a sweep: SAC's figures are SAC's)
            continue
        key = (r["agent"], r["env"], int(r["env_steps"]), int(r["seed"]))
        if key in seen:  # (a record copied into two files is one seed)
            continue
        seen.add(key)
        groups.setdefault(key[:3], []).append(r)
    lines = [
        "| env | agent and settings (`benchmarks/solve.py --agents`) | env steps | seeds | final greedy eval "
        "(5 episodes), median [range] | per seed | reference, mean ± std | source | median against it |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    if not records:
        lines.append("| (no records yet) | | | | | | | | |")
    envs = [*MUJOCO_ENVS, *sorted({env for _, env, _ in groups} - set(MUJOCO_ENVS))]
    for env in envs:
        for agent, _, steps in sorted(k for k in groups if k[1] == env):
            group = sorted(groups[(agent, env, steps)], key=lambda r: r["seed"])
            finals = [float(r["final_eval_return"]) for r in group]
            known = SAC_MUJOCO_REFERENCES.get((env, steps))
            reference = "—" if known is None else f"{known[0]:,.1f} ± {known[1]:,.1f}"
            verdict = "—" if known is None else against(statistics.median(finals), known[0])
            lines.append(
                f"| {env} | `{agent}` | {steps_text(steps)} | {seeds_text([r['seed'] for r in group])} | "
                f"{median_range(finals, '.0f')} | {', '.join(f'{v:.0f}' for v in finals)} | {reference} | "
                f"{'none recorded here' if known is None else known[2]} | {verdict} |"
            )
    return "\n".join(lines) + "\n"


def mappo_spread_table(records: list[dict[str, Any]]) -> str:
    """One row per ``benchmarks/mappo_spread.py`` label: the last evaluation's team return and the
    same on the MAPPO paper's scale over seeds, beside DI-engine's MAPPO at 1M env steps."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        groups.setdefault(r["label"], []).append(r)
    reference, source = DI_ENGINE_SPREAD_1M
    lines = [
        "| settings | seeds | team return, median [range] | MAPPO scale, median [range] | per seed | "
        "wall s, median | reference at 1M env steps | source | against it |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    if not records:
        lines.append("| (no records yet) | | | | | | | | |")
    for label in sorted(groups, key=lambda x: list(MAPPO_SPREAD_LABELS).index(x) if x in MAPPO_SPREAD_LABELS else 99):
        group = sorted(groups[label], key=lambda r: r["seed"])
        scale = [float(r["mappo_scale"]) for r in group]
        above = sum(v >= reference for v in scale)
        lines.append(
            f"| {MAPPO_SPREAD_LABELS.get(label, f'`{label}`')} | {seeds_text([r['seed'] for r in group])} | "
            f"{median_range([float(r['team_return']) for r in group])} | {median_range(scale, '.1f')} | "
            f"{', '.join(f'{v:.1f}' for v in scale)} | {statistics.median(r['wall_s'] for r in group):.0f} | "
            f"~{reference:.0f} | {source} | {against(statistics.median(scale), reference)}; "
            f"{above} of {len(scale)} seeds at or above |"
        )
    return "\n".join(lines) + "\n"


# name -> (records: files or glob patterns, relative to benchmarks/results/; the table made of them)
SECTIONS: dict[str, tuple[tuple[str, ...], Callable[[list[dict[str, Any]]], str]]] = {
    "minatar-ppo": ((os.path.join("minatar", "presets.jsonl"),), minatar_ppo_table),
    "minatar-ppo-10m": ((os.path.join("minatar", "presets-10m.jsonl"),), minatar_ppo_10m_table),
    "minatar-dqn": ((os.path.join("minatar", "dqn-presets.jsonl"),), minatar_dqn_table),
    "mujoco-sac": ((os.path.join("mujoco", "runs-sac-*.jsonl"),), mujoco_sac_table),
    "mappo-spread": ((os.path.join("multiagent", "mappo-spread-jaxmarl.jsonl"),), mappo_spread_table),
}


def replace_section(text: str, name: str, body: str) -> str:
    """``text`` with what lies between ``name``'s markers replaced by ``body``."""
    start, end = f"<!-- generated:{name} start -->", f"<!-- generated:{name} end -->"
    if text.count(start) != 1 or text.count(end) != 1 or text.index(start) > text.index(end):
        raise ValueError(f"expected one {start!r} line before one {end!r} line")
    head, rest = text.split(start)
    _, tail = rest.split(end)
    return f"{head}{start}\n\n{body}\n{end}{tail}"  # (blank lines: markdown ends an HTML block at one)


def regenerate(text: str, results: str) -> str:
    """``text`` with every section in ``SECTIONS`` it has markers for rewritten from ``results``."""
    for name, (records, table) in SECTIONS.items():
        if f"<!-- generated:{name} start -->" in text:
            paths = [path for pattern in records for path in sorted(glob.glob(os.path.join(results, pattern)))]
            rows = [r for path in paths for r in read_records(path)]
            text = replace_section(text, name, table(rows))
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--doc", default=DOC, help="the page (default: %(default)s)")
    parser.add_argument("--results", default=RESULTS, help="where the records are (default: %(default)s)")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a table is out of date")
    args = parser.parse_args(argv)
    try:
        with open(args.doc) as f:
            text = f.read()
        new = regenerate(text, args.results)
    except (OSError, ValueError) as e:
        print(f"published_tables.py: error: {args.doc}: {e}", file=sys.stderr)
        return 2
    if args.check:
        if new != text:
            print(
                f"{args.doc}: generated tables out of date: run python benchmarks/published_tables.py", file=sys.stderr
            )
            return 1
        return 0
    if new != text:
        with open(args.doc, "w") as f:
            f.write(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
