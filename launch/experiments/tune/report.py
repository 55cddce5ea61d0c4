"""What a tune leaves in its directory, and what ``shoal status DIR`` says of it.

* ``trials.csv``: one row per trial (number, state, value, seconds, each sampled setting, why it
  failed); ``summary.md``: the same as a markdown table, best first, under a line on the tune;
* ``best_preset.json``: the best complete trial as a preset file (``shoal train --preset FILE``:
  every agent and experiment setting it trained with that is not the agent's default: the
  preset the tune started from, the fixed ones, the sampled ones, the tune's budget);
* ``importance.png``: Optuna's hyperparameter importances (fANOVA), where matplotlib is
  installed (the ``plots`` extra) and two or more trials completed.
"""

from __future__ import annotations

import csv
import json
import math
import os
import warnings
from typing import Any

from shoal.launch.experiments.tune import study as studies
from shoal.launch.experiments.tune.study import TuneSettings
from shoal.launch.experiments.tune.trials import interrupted

PRESET_FILE = "best_preset.json"


def _rows(study: Any, settings: TuneSettings) -> list[dict[str, Any]]:
    names = [p.name for p in settings.space.params]
    rows = []
    for t in study.get_trials(deepcopy=False):
        state = "interrupted" if interrupted(t) else t.state.name.lower()
        sampled = t.user_attrs.get("settings") or {}
        duration = (
            (t.datetime_complete - t.datetime_start).total_seconds()
            if t.datetime_complete and t.datetime_start
            else None
        )
        rows.append(
            {
                "trial": t.number,
                "state": state,
                "value": t.value,
                "seconds": round(duration, 1) if duration is not None else None,
                **{n: sampled.get(n, t.params.get(n)) for n in names},
                "note": t.user_attrs.get("error")
                or (
                    f"pruned at {t.user_attrs['pruned_at_env_steps']:,} env steps"
                    if "pruned_at_env_steps" in t.user_attrs
                    else ""
                ),
            }
        )
    return rows


def _best(rows: list[dict[str, Any]], settings: TuneSettings) -> list[dict[str, Any]]:
    """``rows`` best first: complete trials by value, then pruned ones by their last
    evaluation's, then the others by number."""
    sign = -1 if settings.direction == "maximize" else 1
    rank = {"complete": 0, "pruned": 1}
    return sorted(rows, key=lambda r: (rank.get(r["state"], 2), sign * (r["value"] or 0), r["trial"]))


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4g}" if math.isfinite(value) else str(value)
    return str(value)


def write_reports(tune_dir: str, study: Any, settings: TuneSettings) -> dict[str, Any]:
    """Writes the directory's reports; returns the tune's summary (the command's JSON line)."""
    rows = _rows(study, settings)
    columns = ["trial", "state", "value", "seconds", *[p.name for p in settings.space.params], "note"]
    with open(os.path.join(tune_dir, "trials.csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, columns)
        writer.writeheader()
        writer.writerows({k: ("" if v is None else v) for k, v in r.items()} for r in rows)
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["state"]] = counts.get(r["state"], 0) + 1
    best = next((r for r in _best(rows, settings) if r["state"] == "complete"), None)
    with open(os.path.join(tune_dir, "summary.md"), "w") as f:
        f.write("\n".join(headline(settings, counts, best)) + "\n\n")
        f.write("| " + " | ".join(columns) + " |\n|" + "---|" * len(columns) + "\n")
        for r in _best(rows, settings):
            f.write("| " + " | ".join(_text(r[c]).replace("|", "/") for c in columns) + " |\n")
    summary: dict[str, Any] = {"tune_dir": tune_dir, "trials": counts, "best_trial": None}
    if best is not None:
        summary.update(
            best_trial=best["trial"],
            best_value=best["value"],
            preset=write_preset(tune_dir, study, settings, best["trial"]),
        )
        summary["best_settings"] = study.get_trials(deepcopy=False)[best["trial"]].user_attrs.get("settings")
    importance = write_importance(tune_dir, study, counts.get("complete", 0))
    if importance:
        summary["importance"] = importance
    return summary


def headline(settings: TuneSettings, counts: dict[str, int], best: dict[str, Any] | None) -> list[str]:
    what = (
        f"IQM of final evaluation returns over seeds {', '.join(map(str, settings.seeds))} (maximized)"
        if settings.objective == "iqm"
        else f"IQM of env steps to the target return over seeds {', '.join(map(str, settings.seeds))} (minimized)"
    )
    done = ", ".join(f"{n} {state}" for state, n in sorted(counts.items())) or "none yet"
    lines = [
        f"tune: {settings.agent} on {settings.env_id}, {settings.trials} trials ({done}); objective: {what}",
        f"best: trial {best['trial']}, {best['value']:.6g}" if best else "best: no complete trial yet",
    ]
    return lines


def write_preset(tune_dir: str, study: Any, settings: TuneSettings, number: int) -> str:
    """The trial ``number`` as a preset file (``shoal train --preset FILE``); returns its path."""
    trial = study.get_trials(deepcopy=False)[number]
    sampled = trial.user_attrs.get("settings") or {}
    from shoal.agents.presets import find_preset  # lazy: gymnasium and the agents, off the CLI's path

    # (the trials' whole settings: the preset they started from, the fixed ones, the sampled ones)
    start = find_preset(settings.agent, settings.env_id, settings.preset)
    base = start.name if start is not None else "none"
    agent_settings = {**(start.settings if start else {}), **settings.fixed, **sampled}
    preset = {
        "agent": settings.agent,
        "env": settings.env_id,
        "source": f"shoal tune {tune_dir}: trial {number}, {settings.objective} {trial.value:.6g} "
        f"over seeds {', '.join(map(str, settings.seeds))}, from preset {base}",
        "base_preset": base,
        "settings": {k: list(v) if isinstance(v, tuple) else v for k, v in agent_settings.items()},
        "experiment": {**(start.experiment if start else {}), **settings.experiment},
    }
    path = os.path.join(tune_dir, PRESET_FILE)
    with open(path, "w") as f:
        json.dump(preset, f, indent=2)
        f.write("\n")
    return path


def write_importance(tune_dir: str, study: Any, complete: int) -> str | None:
    """``importance.png`` where matplotlib is installed and two or more trials completed."""
    if complete < 2:
        return None
    try:
        import matplotlib  # lazy: optional extra (plots)

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # lazy: optional extra (plots)
        from optuna.visualization.matplotlib import plot_param_importances  # lazy: optional extras (tune, plots)
    except ImportError:
        return None

    path = os.path.join(tune_dir, "importance.png")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (Optuna marks its matplotlib plots experimental)
            axes: Any = plot_param_importances(study)  # (its figure: a Figure, typed Figure | SubFigure)
        axes.figure.tight_layout()
        axes.figure.savefig(path, dpi=100)
        plt.close(axes.figure)
    except (ValueError, RuntimeError, ZeroDivisionError):  # (e.g. every trial sampled the same values)
        return None
    return path


def describe_tune(tune_dir: str) -> list[str]:
    """``shoal status DIR`` of a tune: a line on it, its trials best first, and its files."""
    settings = studies.read_settings(tune_dir, check=False)  # (imports nothing the directory names)
    study = studies.load(tune_dir)
    rows = _rows(study, settings)
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["state"]] = counts.get(r["state"], 0) + 1
    best = next((r for r in _best(rows, settings) if r["state"] == "complete"), None)
    lines = headline(settings, counts, best)
    names = [p.name for p in settings.space.params]
    lines.append(f"{'trial':>5}  {'state':<11} {'value':>10} {'seconds':>8}  settings")
    for r in _best(rows, settings):
        sampled = ", ".join(f"{n}={_text(r[n])}" for n in names if r[n] is not None)
        note = f"  ({r['note']})" if r["note"] else ""
        lines.append(
            f"{r['trial']:>5}  {r['state']:<11} {_text(r['value']):>10} {_text(r['seconds']):>8}  {sampled}{note}"
        )
    lines.append(f"study: {studies.storage_url(tune_dir)} (optuna-dashboard {studies.storage_url(tune_dir)})")
    if os.path.isfile(os.path.join(tune_dir, PRESET_FILE)):
        lines.append(f"best preset: {os.path.join(tune_dir, PRESET_FILE)} (shoal train --preset FILE)")
    return lines
