"""What ``shoal status RUN_DIR`` says of a run from its files: any run, one process or
distributed, running or ended (a running distributed program's node table comes first, from
its control service; ``commands.control``).

Read only, never through a link (``commands.control`` checks the directory first, as a run
does: ``check_run_directory``), and nothing but JSON and CSV: the run's settings (``config.json``), its result
(``result.json``, once it ended), its last checkpoint (``checkpoints/run.json``) and the last
rows of its CSV logs (``train.csv`` in one process; ``actor_<i>.csv``, ``learner.csv`` and
``program.csv`` in a distributed run; ``eval.csv``).
"""

from __future__ import annotations

import csv
import glob
import json
import os
import time
from typing import Any

from shoal.launch.experiments.run_directory.config_record import flat_record


def _json(path: str) -> Any:
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise ValueError(f"cannot read {path}: {getattr(e, 'strerror', None) or e}") from None


def _last_row(path: str) -> dict[str, str] | None:
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except (OSError, csv.Error):
        return None
    return rows[-1] if rows else None


def _number(row: dict[str, str] | None, key: str) -> float | None:
    try:
        return float(row[key]) if row and row.get(key) not in (None, "") else None
    except ValueError:
        return None


def _ago(path: str) -> str:
    seconds = max(0.0, time.time() - os.path.getmtime(path))
    return (
        f"{seconds:.0f} s ago"
        if seconds < 120
        else f"{seconds / 60:.0f} min ago"
        if seconds < 7200
        else f"{seconds / 3600:.1f} h ago"
    )


def describe_run(run_dir: str, running: bool) -> list[str]:
    """Lines saying what the run in ``run_dir`` is, where it stands and where its logs are;
    ``running``: a distributed program answers in it now."""
    config = _json(os.path.join(run_dir, "config.json"))
    if not isinstance(config, dict):
        raise ValueError(f"{run_dir!r} is not a Shoal run directory (no config.json in it)")
    config = flat_record(config, os.path.join(run_dir, "config.json"))  # (either schema version, read flat)
    launch = config.get("launch") if isinstance(config.get("launch"), dict) else None
    how = f"{launch.get('launcher')} launcher, {launch.get('num_actors')} actors" if launch else "one process"
    how = f"{how}; {config.get('replay')} replay"
    result = _json(os.path.join(run_dir, "result.json"))
    saved = _json(os.path.join(run_dir, "checkpoints", "run.json"))
    if isinstance(saved, dict) and "anakin" in saved or isinstance(result, dict) and result.get("launcher") == "anakin":
        how = "anakin: envs, policy and update in one compiled loop"  # (shoal.launch.experiments.anakin)
    lines = [f"run: {config.get('agent')} on {config.get('env_id')}, seed {config.get('seed')} ({how})"]
    if isinstance(result, dict):
        why = (
            "solved"
            if result.get("solved")
            else f"stopped by {result['stopped_by']}"
            if result.get("stopped_by")
            else f"terminated ({result['terminated']})"
            if result.get("terminated")
            else "out of budget"
        )
        lines.append(f"state: ended, {why} ({_ago(os.path.join(run_dir, 'result.json'))})")
    elif running:
        lines.append("state: running")
    else:
        lines.append(
            "state: not running (stopped, killed, or a one-process run going on: its process holds the "
            "lock)" + ("; shoal train --resume continues it from its last checkpoint" if saved else "")
        )
    train = _last_row(os.path.join(run_dir, "train.csv"))
    actors = [row for row in map(_last_row, sorted(glob.glob(os.path.join(run_dir, "actor_*.csv")))) if row]
    counter = (saved or {}).get("counter") or {}
    env_steps = (result or {}).get("env_steps")
    if env_steps is None:
        known = [
            _number(train, "env_steps"),
            sum(_number(row, "env_steps") or 0 for row in actors) or None,
            counter.get("env_steps"),
        ]
        env_steps = max((x for x in known if x is not None), default=None)
    budget = config.get("max_env_steps")
    if env_steps is not None:
        rate = (
            _number(train, "steps_per_s")
            if train
            else (sum(_number(row, "steps_per_s") or 0 for row in actors) if actors else None)
        )
        lines.append(
            f"env steps: {int(env_steps):,} of {budget:,}"
            if isinstance(budget, int)
            else f"env steps: {int(env_steps):,}"
        )
        if rate is not None and not result:
            lines[-1] += f" ({rate:,.0f} per second at the last log row)"
    learner = (result or {}).get("learner_steps")
    if learner is None:
        learner = (
            _number(train, "learner_steps")
            or _number(_last_row(os.path.join(run_dir, "learner.csv")), "learner_steps")
            or counter.get("learner_steps")
        )
    if learner is not None:
        lines.append(f"learner steps: {int(learner):,}")
    evaluation = _last_row(os.path.join(run_dir, "eval.csv"))
    if evaluation:
        lines.append(
            f"last evaluation: return {_number(evaluation, 'eval_return'):.4g} at "
            f"{int(_number(evaluation, 'env_steps') or 0):,} env steps "
            f"({_ago(os.path.join(run_dir, 'eval.csv'))}; target {config.get('resolved_target_return')})"
        )
    else:
        lines.append("last evaluation: none yet")
    program = _last_row(os.path.join(run_dir, "program.csv"))
    if program and program.get("actors"):
        lines.append(f"actors: {program['actors']} (program.csv's last change)")
    if saved:
        lines.append(
            f"last checkpoint: {int(saved.get('env_steps', 0)):,} env steps "
            f"({_ago(os.path.join(run_dir, 'checkpoints', 'run.json'))})"
        )
    logs = os.path.join(run_dir, "logs")
    lines.append(
        f"logs: {logs}{os.sep} (one per node)"
        if os.path.isdir(logs)
        else f"logs: {os.path.join(run_dir, '*.csv')} (CSV), {os.path.join(run_dir, 'tb')} (TensorBoard)"
    )
    return lines
