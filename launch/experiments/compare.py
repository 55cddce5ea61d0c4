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
the bootstrap stratified by task (``shoal.core.aggregates``).

Plots (one PNG and one SVG per task): mean eval return per group against env steps and against
wall seconds, with the range (min to max) of its runs shaded; a run that stopped (solved) keeps
its last return after its end.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
from typing import Any, Mapping, Sequence

import numpy as np

from shoal.core import aggregates
from shoal.core.files import check_output, json_text, write_output


def load_run(path: str) -> dict[str, Any]:
    """A run directory's ``config.json`` and evaluations (``eval.csv``: env steps, wall seconds,
    mean return per evaluation). ``ValueError`` naming ``path`` if it is not a run directory."""
    config_path = os.path.join(path, "config.json")
    if not os.path.isfile(config_path):
        raise ValueError(f"{path} is not a run directory (it has no config.json)")
    with open(config_path) as f:
        config = json.load(f)
    rows = []
    eval_path = os.path.join(path, "eval.csv")
    if os.path.isfile(eval_path):
        with open(eval_path) as f:
            rows = [r for r in csv.DictReader(f) if r.get("eval_return") not in (None, "", "nan")]
    evals = np.array([[float(r["env_steps"]), float(r["wall_s"]), float(r["eval_return"])] for r in rows])
    return {"path": path, "config": config, "evals": evals.reshape(-1, 3), "task": config.get("env_id", "?"),
            "target": config.get("resolved_target_return")}


def group_of(config: dict[str, Any], by: str) -> str:
    """The group label of a run's ``config`` under ``--by`` (see the module docstring)."""
    if by in ("agent", "preset"):
        return str(config.get(by) or "none")
    agent_config = config.get("agent_config", {})
    if by.startswith("agent_config."):
        key, where = by.split(".", 1)[1], agent_config
    else:
        key, where = by, (config if by in config else agent_config)
    if key not in where:
        known = sorted(k for k in config if k != "agent_config") + sorted(agent_config)
        raise ValueError(f"--by {by!r}: no such setting in the {config.get('agent')} run's config; one of "
                         f"agent, preset, {', '.join(known)}")
    return f"{key}={where[key]}"


def compare(run_dirs: Sequence[str], by: str = "agent", out: str | None = None, samples: int = 2000,
            labels: Mapping[str, str] | None = None) -> dict:
    """Groups ``run_dirs`` (by ``by``, or by ``labels[run_dir]`` where given), and returns the
    summary (``{"groups": {group: {"tasks": ..., "all tasks": ...}}}``); with ``out``, writes
    ``table.md``, ``summary.json`` (strict JSON) and a plot per task there, none of them through a
    link (``write_output``: a link in place of one is refused)."""
    if not run_dirs:
        raise ValueError("shoal compare needs at least one run directory")
    runs = [load_run(path) for path in run_dirs]
    empty = [r["path"] for r in runs if not len(r["evals"])]
    if empty:
        raise ValueError(f"no evaluation recorded in {', '.join(empty)} (eval.csv is missing or empty)")
    for r in runs:
        r["group"] = labels[r["path"]] if labels and r["path"] in labels else group_of(r["config"], by)
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
        summary["groups"][group] = {"tasks": per_task, "all tasks": _aggregate(normalized, samples)}
    if out:  # (each file through write_output: a link in its place is refused, never written through)
        os.makedirs(out, exist_ok=True)
        for name in ["table.md", "summary.json", *(_slug(task) + suffix for task in tasks for suffix in (".png", ".svg"))]:
            check_output(os.path.join(out, name))  # (all of them before the first is written)
        write_output(os.path.join(out, "table.md"), markdown_table(summary))
        write_output(os.path.join(out, "summary.json"), json_text(summary, "summary.json", indent=2))
        for task in tasks:
            plot_task([r for r in runs if r["task"] == task], task, os.path.join(out, _slug(task)))
    return summary


def _task_scale(runs: list[dict]) -> tuple[float, float]:
    """(low, high) for normalizing a task: its lowest eval return, and its target (or highest)."""
    returns = np.concatenate([r["evals"][:, 2] for r in runs])
    targets = {r["target"] for r in runs if r["target"] is not None}
    low, high = float(returns.min()), float(max(targets) if targets else returns.max())
    return (low, high) if high > low else (low, low + 1.0)


def _task_summary(runs: list[dict], finals: list[float], normalized: dict, samples: int) -> dict:
    iqm = aggregates.bootstrap_ci({"task": finals}, aggregates.iqm, samples)
    gap = aggregates.bootstrap_ci(normalized, aggregates.optimality_gap, samples)
    target = runs[0]["target"]
    reached = [r["evals"][np.argmax(r["evals"][:, 2] >= target)] for r in runs
               if target is not None and (r["evals"][:, 2] >= target).any()]
    return {"runs": len(runs), "seeds": sorted(r["config"].get("seed") for r in runs), "target": target,
            "final_return_iqm": iqm, "final_return_mean": float(np.mean(finals)), "optimality_gap": gap,
            "reached_target": len(reached),
            "env_steps_to_target": float(np.median([e[0] for e in reached])) if reached else None,
            "wall_s_to_target": float(np.median([e[1] for e in reached])) if reached else None}


def _aggregate(normalized: dict[str, np.ndarray], samples: int) -> dict:
    return {"tasks": len(normalized), "runs": int(sum(len(s) for s in normalized.values())),
            "normalized_iqm": aggregates.bootstrap_ci(normalized, aggregates.iqm, samples),
            "optimality_gap": aggregates.bootstrap_ci(normalized, aggregates.optimality_gap, samples)}


def _ci(point_low_high: Sequence[float], fmt: str = ".4g") -> str:
    point, low, high = point_low_high
    return f"{point:{fmt}} [{low:{fmt}}, {high:{fmt}}]"


def markdown_table(summary: dict) -> str:
    """The summary as markdown: a row per group and task, and one per group over all its tasks
    (normalized returns: its IQM column is on that scale)."""
    lines = [f"| {summary['by']} | task | runs | final return IQM [95% CI] | mean | optimality gap [95% CI] "
             "| reached target | env steps to target (median) | wall s to target (median) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for group, g in summary["groups"].items():
        for task, t in g["tasks"].items():
            reached = f"{t['reached_target']}/{t['runs']}" if t["target"] is not None else "no target"
            steps = f"{t['env_steps_to_target']:,.0f}" if t["env_steps_to_target"] is not None else "—"
            wall = f"{t['wall_s_to_target']:.1f}" if t["wall_s_to_target"] is not None else "—"
            lines.append(f"| {group} | {task} | {t['runs']} | {_ci(t['final_return_iqm'])} | "
                         f"{t['final_return_mean']:.4g} | {_ci(t['optimality_gap'], '.3f')} | {reached} | {steps} | {wall} |")
        a = g["all tasks"]
        lines.append(f"| {group} | all tasks ({a['tasks']}, normalized) | {a['runs']} | {_ci(a['normalized_iqm'], '.3f')} | "
                     f"| {_ci(a['optimality_gap'], '.3f')} | | | |")
    return "\n".join(lines) + "\n"


def curve(runs: list[dict], column: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(x, mean, low, high)`` of eval return against ``column`` (0: env steps, 1: wall s) over
    ``runs``, each interpolated on the union of their x values (its last return kept after its end)."""
    x = np.unique(np.concatenate([r["evals"][:, column] for r in runs]))
    ys = np.array([np.interp(x, r["evals"][:, column], r["evals"][:, 2]) for r in runs])
    return x, ys.mean(axis=0), ys.min(axis=0), ys.max(axis=0)


def plot_task(runs: list[dict], task: str, path: str) -> None:
    """``path``.png and ``path``.svg: each group's mean eval return (its range shaded) against
    env steps and against wall seconds; the target dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    for group in sorted({r["group"] for r in runs}):
        members = [r for r in runs if r["group"] == group]
        for ax, column in zip(axes, (0, 1)):
            x, mean, low, high = curve(members, column)
            line, = ax.plot(x, mean, label=f"{group} ({len(members)} runs)")
            ax.fill_between(x, low, high, color=line.get_color(), alpha=0.2, linewidth=0)
    target = next((r["target"] for r in runs if r["target"] is not None), None)
    label_axes(axes, target, "eval return (mean, range)", "wall seconds")
    fig.suptitle(task)
    fig.tight_layout()
    try:
        for suffix, options in ((".png", {"dpi": 80}), (".svg", {})):
            image = io.BytesIO()
            fig.savefig(image, format=suffix[1:], **options)
            write_output(path + suffix, image.getvalue())
    finally:
        plt.close(fig)


def label_axes(axes: Sequence[Any], target: float | None, ylabel: str, wall_label: str) -> None:
    """The two panels of a learning-curve figure (against env steps, and against wall seconds):
    axis labels, a grid, the target dashed, the legend on the first."""
    for ax, xlabel in zip(axes, ("env steps", wall_label)):
        if target is not None:
            ax.axhline(target, color="grey", linestyle="--", linewidth=1, label="target")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)


def _slug(task: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", task)
