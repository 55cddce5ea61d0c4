"""``shoal compare RUN_DIR... [--by agent|preset|KEY]``: runs grouped, curves and aggregate scores.

Runs are grouped by ``--by``: their agent (the default), preset, or any setting of their
``config.json`` (a top-level key such as ``num_envs``, or an agent setting such as
``learning_rate`` or ``agent_config.learning_rate``); the seeds of a group are its runs. A task
is an env id. Per group and task the table gives, over the group's runs:

* the final return (each run's last evaluation): interquartile mean (IQM) with a 95%
  stratified-bootstrap interval, and the mean;
* the optimality gap of the normalized final return, with its interval;
* how many runs reached the target (the run's resolved target return), and the median env
  steps and wall seconds of their first evaluation at it.

Returns are normalized per task from the lowest evaluation return any compared run had on it
(0) to the target (1; the highest return seen where the task has no target), so one table row
per group also aggregates over tasks: the IQM and optimality gap of all its normalized scores,
the bootstrap stratified by task (``shoal.launch.experiments.cli.aggregates``).

Plots (one PNG and one SVG per task, ``compare_plots``): mean eval return per group against env
steps and against wall seconds, with the range (min to max) of its runs shaded; a run that
stopped (solved) keeps its last return after its end.

**Input.** A run directory's ``config.json`` and ``eval.csv`` are checked as they are read
(``load_run``; ``shoal.launch.experiments.cli.compare_inputs`` says what they must hold): anything
else is one ``ValueError`` line naming the file (and line) and the field. A run without any
evaluation is left out with a warning line (all of them: an error). ``samples``
(``--bootstrap-samples``) is at most ``aggregates.MAX_SAMPLES``.
"""

from __future__ import annotations

import collections
import os
import re
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from shoal.core.files import check_output, json_text, write_output
from shoal.launch.experiments.cli import aggregates
from shoal.launch.experiments.cli.compare_inputs import load_run
from shoal.launch.experiments.cli.compare_plots import plot_task, pyplot


def group_of(config: dict[str, Any], by: str, path: str = "config.json") -> str:
    """The group label of a run's ``config`` (read from ``path``, which an error names) under
    ``--by`` (see the module docstring)."""
    if by in ("agent", "preset"):
        return str(config.get(by) or "none")
    agent_config = config.get("agent_config", {})
    if by.startswith("agent_config."):
        key, where = by.split(".", 1)[1], agent_config
    else:
        key, where = by, (config if by in config else agent_config)
    if key not in where:
        known = sorted({"agent", "preset", *(k for k in config if k != "agent_config"), *agent_config})
        raise ValueError(
            f"--by {by!r}: no such setting in {path} (a {config.get('agent')} run); one of {', '.join(known)}"
        )
    return f"{key}={where[key]}"


def compare(
    run_dirs: Sequence[str],
    by: str = "agent",
    out: str | None = None,
    samples: int = 2000,
    labels: Mapping[str, str] | None = None,
) -> dict:
    """Groups ``run_dirs`` (by ``by``, or by ``labels[run_dir]`` where given), and returns the
    summary (``{"groups": {group: {"tasks": ..., "all tasks": ...}}}``; a run without evaluations
    left out, with a warning line); with ``out``, writes
    ``table.md``, ``summary.json`` (strict JSON) and a plot per task there, none of them through a
    link (``write_output``: a link in place of one is refused); ``out`` itself, given among
    ``run_dirs``, is left out of them."""
    if out:  # (its own output is never an input: `shoal compare runs/*` twice, runs/compare the default --out)
        run_dirs = [path for path in run_dirs if os.path.realpath(path) != os.path.realpath(out)]
    if not run_dirs:
        raise ValueError("shoal compare needs at least one run directory")
    if isinstance(samples, bool) or not isinstance(samples, int) or not 1 <= samples <= aggregates.MAX_SAMPLES:
        raise ValueError(f"--bootstrap-samples must be in [1, {aggregates.MAX_SAMPLES:,}], got {samples}")
    if out:
        pyplot()  # (matplotlib, the plots extra, before anything is read or written: one line if missing)
    runs = [load_run(path) for path in run_dirs]
    empty = [r["path"] for r in runs if not len(r["evals"])]
    if len(empty) == len(runs):
        raise ValueError(
            f"no evaluation recorded in {', '.join(empty)} (eval.csv is missing or empty): nothing to compare"
        )
    for path in empty:
        print(
            f"shoal: warning: no evaluation recorded in {path} (eval.csv is missing or empty); it is left out",
            file=sys.stderr,
            flush=True,
        )
    runs = [r for r in runs if len(r["evals"])]
    for r in runs:
        r["group"] = (
            labels[r["path"]]
            if labels and r["path"] in labels
            else group_of(r["config"], by, os.path.join(r["path"], "config.json"))
        )
    tasks = sorted({r["task"] for r in runs})
    scale = {task: _task_scale([r for r in runs if r["task"] == task]) for task in tasks}
    summary: dict[str, Any] = {"by": by, "groups": {}}
    for group in sorted({r["group"] for r in runs}):
        members = [r for r in runs if r["group"] == group]
        per_task, normalized = {}, {}
        for task in sorted({r["task"] for r in members}):
            task_runs = [r for r in members if r["task"] == task]
            finals = [float(r["evals"][-1, 2]) for r in task_runs]
            normalized[task] = aggregates.normalized(finals, *scale[task])
            per_task[task] = _task_summary(task_runs, finals, {task: normalized[task]}, samples)
            if len(task_runs) < 3:
                print(
                    f"shoal: warning: {group} on {task} has {len(task_runs)} run{'s' * (len(task_runs) > 1)}: a "
                    "95% interval from so few seeds means little (3 or more are worth comparing)",
                    file=sys.stderr,
                    flush=True,
                )
        summary["groups"][group] = {"tasks": per_task, "all tasks": _aggregate(normalized, samples)}
    if out:  # (each file through write_output: a link in its place is refused, never written through)
        os.makedirs(out, exist_ok=True)
        for name in [
            "table.md",
            "summary.json",
            *(_slug(task) + suffix for task in tasks for suffix in (".png", ".svg")),
        ]:
            check_output(os.path.join(out, name))  # (all of them before the first is written)
        write_output(os.path.join(out, "table.md"), markdown_table(summary))
        write_output(os.path.join(out, "summary.json"), json_text(summary, "summary.json", indent=2))
        for task in tasks:
            plot_task([r for r in runs if r["task"] == task], task, os.path.join(out, _slug(task)))
    return summary


def _task_scale(runs: list[dict]) -> tuple[float, float]:
    """(low, high) for normalizing a task: its lowest eval return, and its runs' most common
    target (the lower of equally common ones; a run's own --target-return does not rescale the
    others), or its highest return where no run has one."""
    returns = np.concatenate([r["evals"][:, 2] for r in runs])
    targets = collections.Counter(r["target"] for r in runs if r["target"] is not None)
    common = min(targets, key=lambda t: (-targets[t], t)) if targets else None
    low, high = float(returns.min()), float(common if common is not None else returns.max())
    return (low, high) if high > low else (low, low + 1.0)


def _task_summary(runs: list[dict], finals: list[float], normalized: dict, samples: int) -> dict:
    iqm = aggregates.bootstrap_ci({"task": finals}, aggregates.iqm, samples)
    gap = aggregates.bootstrap_ci(normalized, aggregates.optimality_gap, samples)
    targets = sorted({r["target"] for r in runs if r["target"] is not None})
    # each run against its own target (its resolved_target_return): --target-return may differ
    reached = [
        r["evals"][np.argmax(r["evals"][:, 2] >= r["target"])]
        for r in runs
        if r["target"] is not None and (r["evals"][:, 2] >= r["target"]).any()
    ]
    return {
        "runs": len(runs),
        "seeds": sorted(r["config"].get("seed") for r in runs),
        "target": (targets[0] if len(targets) == 1 else targets) if targets else None,
        "runs_with_target": sum(r["target"] is not None for r in runs),
        "final_return_iqm": iqm,
        "final_return_mean": float(np.mean(finals)),
        "optimality_gap": gap,
        "reached_target": len(reached),
        "env_steps_to_target": float(np.median([e[0] for e in reached])) if reached else None,
        "wall_s_to_target": float(np.median([e[1] for e in reached])) if reached else None,
    }


def _aggregate(normalized: dict[str, np.ndarray], samples: int) -> dict:
    return {
        "tasks": len(normalized),
        "runs": int(sum(len(s) for s in normalized.values())),
        "normalized_iqm": aggregates.bootstrap_ci(normalized, aggregates.iqm, samples),
        "optimality_gap": aggregates.bootstrap_ci(normalized, aggregates.optimality_gap, samples),
    }


def _ci(point_low_high: Sequence[float], fmt: str = ".4g") -> str:
    point, low, high = point_low_high
    return f"{point:{fmt}} [{low:{fmt}}, {high:{fmt}}]"


def markdown_table(summary: dict) -> str:
    """The summary as markdown: a row per group and task, and one per group over all its tasks
    (normalized returns: its IQM column is on that scale)."""
    lines = [
        f"| {summary['by']} | task | runs | final return IQM [95% CI] | mean | optimality gap [95% CI] "
        "| reached target | env steps to target (median) | wall s to target (median) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for group, g in summary["groups"].items():
        for task, t in g["tasks"].items():
            reached = f"{t['reached_target']}/{t['runs_with_target']}" if t["target"] is not None else "no target"
            steps = f"{t['env_steps_to_target']:,.0f}" if t["env_steps_to_target"] is not None else "—"
            wall = f"{t['wall_s_to_target']:.1f}" if t["wall_s_to_target"] is not None else "—"
            lines.append(
                f"| {group} | {task} | {t['runs']} | {_ci(t['final_return_iqm'])} | "
                f"{t['final_return_mean']:.4g} | {_ci(t['optimality_gap'], '.3f')} | {reached} | {steps} | {wall} |"
            )
        a = g["all tasks"]
        lines.append(
            f"| {group} | all tasks ({a['tasks']}, normalized) | {a['runs']} | {_ci(a['normalized_iqm'], '.3f')} | "
            f"| {_ci(a['optimality_gap'], '.3f')} | | | |"
        )
    return "\n".join(lines) + "\n"


def _slug(task: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", task)
