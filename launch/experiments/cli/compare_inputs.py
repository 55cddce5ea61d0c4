"""What ``shoal compare`` reads of a run directory, checked as it is read: ``config.json`` (of
either schema version, read in version 1's flat layout: ``config_record``) an object whose ``env_id`` is a string, ``seed`` an integer, ``resolved_target_return`` a finite
number or null and ``agent_config`` an object; ``eval.csv`` with the columns ``env_steps``,
``wall_s`` and ``eval_return``, each value a finite number within float32's range (a return
beyond it is none Shoal records), steps and seconds >= 0. Anything else is one ``ValueError``
line naming the file (and line) and the field. A row without a return (empty or NaN) is no
evaluation."""

from __future__ import annotations

import csv
import math
import os
from typing import Any

import numpy as np

from shoal.launch.experiments.run_directory.config_record import flat_record
from shoal.launch.experiments.run_directory.directory import read_json
from shoal.launch.experiments.run_directory.schemas import _check, _fail

COLUMNS = ("env_steps", "wall_s", "eval_return")  # (eval.csv's, as the evaluator writes them)
MAX_VALUE = float(np.finfo(np.float32).max)  # (3.4e38: no reward, so no return Shoal records, is beyond it)


def load_run(path: str) -> dict[str, Any]:
    """A run directory's ``config.json`` and evaluations (``eval.csv``: env steps, wall seconds,
    mean return per evaluation; none if it has no such file). ``ValueError`` naming ``path`` if
    it is not a run directory, and the file and field that is not as the module docstring says."""
    config_path = os.path.join(path, "config.json")
    if not os.path.isfile(config_path):
        raise ValueError(f"{path} is not a run directory (it has no config.json)")
    config = read_json(config_path, "the run's config")
    _check(config_path, "the config", config, dict)
    config = flat_record(config, config_path)  # (either schema version, read flat: what --by names)
    _check(config_path, "env_id", config.get("env_id"), str)
    if not config["env_id"]:
        _fail(config_path, "env_id", "an env id", config["env_id"])
    _check(config_path, "seed", config.get("seed"), int)
    target = config.get("resolved_target_return")
    _check(config_path, "resolved_target_return", target, float | None)
    if target is not None and abs(target) > MAX_VALUE:
        _fail(config_path, "resolved_target_return", f"within ±{MAX_VALUE:.2g} or null", target)
    _check(config_path, "agent_config", config.get("agent_config", {}), dict)
    evals = read_evaluations(os.path.join(path, "eval.csv"))
    return {"path": path, "config": config, "evals": evals, "task": config["env_id"], "target": target}


def read_evaluations(path: str) -> np.ndarray:
    """``[evaluations, 3]``: ``COLUMNS`` of each row of ``path`` (an ``eval.csv``) that has a
    return (empty if there is no such file); one ``ValueError`` line naming the file, the line and
    the field of a value that is not a finite number within ±``MAX_VALUE`` (or steps or seconds
    below 0), a missing column, or a line ``csv`` cannot read (a field over its 128 KiB limit)."""
    if not os.path.lexists(path):
        return np.zeros((0, 3))
    if not os.path.isfile(path):
        raise ValueError(f"{path} is not a file")
    rows = []
    try:
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            header = reader.fieldnames
            if not header:
                return np.zeros((0, 3))
            missing = [column for column in COLUMNS if column not in header]
            if missing:
                shown = ", ".join(header)
                raise ValueError(
                    f"{path}: no {missing[0]} column (it has {shown[:120]}{'...' if len(shown) > 120 else ''})"
                )
            for row in reader:
                values = [_value(path, reader.line_num, column, row.get(column)) for column in COLUMNS]
                if not math.isnan(values[2]):  # (no return: no evaluation)
                    rows.append(values)
    except csv.Error as e:
        raise ValueError(f"{path} line {reader.reader.line_num}: {e}") from None  # (DictReader's own lags a line)
    except UnicodeDecodeError as e:
        raise ValueError(f"{path} is not text: {e.reason} at byte {e.start}") from None
    except OSError as e:
        raise ValueError(f"cannot read {path}: {e.strerror or e}") from None
    return np.array(rows, np.float64).reshape(-1, 3)


def _value(path: str, line: int, column: str, text: str | None) -> float:
    """One value of ``eval.csv`` (NaN: an empty or NaN return, which the caller skips)."""
    where = f"{path} line {line}"
    if text is None:
        raise ValueError(f"{where}: {column} is missing (the row is short)")
    if column == "eval_return" and text.strip().lower() in ("", "nan"):
        return math.nan
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and abs(value) <= MAX_VALUE):
        _fail(where, column, f"a finite number within ±{MAX_VALUE:.2g}", text)
    if column != "eval_return" and value < 0:
        _fail(where, column, "a number >= 0", text)
    return value
