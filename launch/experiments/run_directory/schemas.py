"""The schemas of a run directory's two state files, checked before a resume does anything.

``check_config(path, saved)`` checks a ``config.json`` (what ``ExperimentConfig.to_dict`` wrote,
with the ``launch`` settings, or a run of schema version 1 wrote: ``config_record``); ``check_run(path, run)`` a ``checkpoints/run.json`` (what
``checkpointing.commit`` wrote). Both check types and shapes only -- which values are in range
is the config's own ``validate`` (a resumed config is validated like a new one), and whether
the checkpoint fits the config is ``check_resumable`` -- and raise one ``ValueError``:

    <file>: <field> must be <what>, got <value>

for the first bad field (``<value>`` as JSON, cut at 60 characters), so a hand-edited or
damaged file is refused in one line instead of a traceback half-way through a resume. Keys a
schema does not name are ignored (``jax_devices``, ``saved_at``, ...).
"""

from __future__ import annotations

import dataclasses
import json
import math
import numbers
import typing
from typing import Any

from shoal.agents.registry import config_class
from shoal.launch.experiments.config_groups import FLAT_NAMES, GROUPS
from shoal.launch.experiments.distributed.autoscale import AUTO  # (its bounds are checked with the other settings)
from shoal.launch.experiments.run_directory.config_record import record_version

LAUNCH_FIELDS: dict[str, Any] = {
    "launcher": str,
    "num_actors": int | str,
    "ray_address": str | None,
    "resources": list[str],
    "ports": str | None,
    "params_via": str,
}
NOT_CHECKED = {("run", "resume")}  # (never recorded)
EVALUATOR_FIELDS: dict[str, Any] = {
    "next": int,
    "num_evals": int,
    "last_return": float | None,
    "last_at": int,
    "eval_s": float,
}


def check_config(path: str, saved: Any) -> None:
    """Raises ``ValueError`` if ``saved`` (the JSON of ``config.json`` at ``path``) is not the
    shape of a run's config: a schema version this Shoal reads (``config_record``), the
    ``ExperimentConfig`` fields it holds of their types (schema version 2: each group an object,
    a field named ``group.field``; version 1: at the top level by flat name), ``agent`` a
    registered agent whose settings ``agent_config`` holds, ``launch`` null or the distributed
    launch settings. (Missing keys are ``config_from_dict``'s to name.)"""
    _check(path, "the config", saved, dict)
    version = record_version(path, saved)
    for group, kind in GROUPS.items():
        hints = typing.get_type_hints(kind)
        if version == 2:
            if group in saved:
                _check(path, group, saved[group], dict)
            values, names = saved.get(group) or {}, {f.name: f"{group}.{f.name}" for f in dataclasses.fields(kind)}
        else:
            names = {f.name: FLAT_NAMES[(group, f.name)] for f in dataclasses.fields(kind)}
            values = {field: saved[flat] for field, flat in names.items() if flat in saved}
        for field, value in values.items():
            if field in names and (group, field) not in NOT_CHECKED:
                kind_of = str | None if (group, field) == ("env", "factory") else hints[field]  # (recorded as its path)
                _check(path, names[field], value, kind_of)
    _check(path, "preset", saved.get("preset"), str | None)
    if "agent" in saved:
        _check(path, "agent", saved["agent"], str)
        try:
            config_class(saved["agent"])
        except ValueError as e:
            raise ValueError(f"{path}: agent: {e}") from None
    if "agent_config" in saved:
        _check(path, "agent_config", saved["agent_config"], dict)
        if "agent" in saved:
            settings = typing.get_type_hints(config_class(saved["agent"]))
            for key, value in saved["agent_config"].items():
                if key not in settings:
                    _fail(
                        path,
                        f"agent_config.{key}",
                        f"a {saved['agent']} setting (one of {', '.join(sorted(settings))})",
                        key,
                    )
                _check(path, f"agent_config.{key}", value, settings[key])
    launch = saved.get("launch")
    _check(path, "launch", launch, dict | None)
    for key, kind in LAUNCH_FIELDS.items():
        if launch and key in launch:
            _check(path, f"launch.{key}", launch[key], kind)
    if launch and isinstance(launch.get("num_actors"), str) and not AUTO.match(launch["num_actors"]):
        _fail(path, "launch.num_actors", 'an integer, "auto" or "auto:MIN-MAX"', launch["num_actors"])


def check_run(path: str, run: Any) -> None:
    """Raises ``ValueError`` if ``run`` (the JSON of ``run.json`` at ``path``) is not the shape
    of a checkpoint's record: its steps, learner version and digest, the agent and environment
    spec it was made for (an object: a checkpoint always names them), the counter (integers in
    ``[0, 2**53)``), the evaluator's schedule (or null: it starts afresh), each actor's schedule
    position and RNG key, and the replay checkpoint (a directory name)."""
    _check(path, "the checkpoint record", run, dict)
    for key, kind in (
        ("env_steps", int),
        ("learner_step", int),
        ("learner_version", int),
        ("learner_digest", str),
        ("agent", str),
        ("spec", dict),
        ("counter", dict),
        ("actors", dict),
    ):
        if key not in run:
            raise ValueError(f"{path}: {key} is missing; the checkpoint record is incomplete")
        _check(path, key, run[key], kind)
    for key in ("env_steps", "learner_step", "learner_version"):
        _non_negative(path, key, run[key])
    for name, value in run["counter"].items():  # (what a Counter holds)
        if not _is(value, int) or not 0 <= value < 2**53:
            _fail(path, f"counter.{name}", "an integer in [0, 2**53)", value)
    evaluator = run.get("evaluator")
    _check(path, "evaluator", evaluator, dict | None)
    for key, kind in EVALUATOR_FIELDS.items() if evaluator is not None else ():
        _check(path, f"evaluator.{key}", evaluator.get(key), kind)
    for label, actor in run["actors"].items():
        _check(path, f"actors.{label}", actor, dict)
        _check(path, f"actors.{label}.env_steps", actor.get("env_steps"), int)
        _non_negative(path, f"actors.{label}.env_steps", actor["env_steps"])
        _check(path, f"actors.{label}.key", actor.get("key"), list[int])
    replay = run.get("replay_checkpoint")
    _check(path, "replay_checkpoint", replay, str | None)
    if replay is not None and (replay in ("", ".", "..") or "/" in replay or "\0" in replay):
        _fail(path, "replay_checkpoint", "the name of a directory in checkpoints/replay", replay)
    for name, items in (run.get("replay_items") or {}).items():
        _check(path, f"replay_items.{name}", items, int)


def _check(path: str, field: str, value: Any, kind: Any) -> None:
    """Raises the one-line error unless ``value`` is of ``kind`` (a type hint: ``int``,
    ``float``, ``bool``, ``str``, ``dict``, ``list[X]``, ``tuple[X, ...]``, ``X | None``)."""
    if not _is(value, kind):
        _fail(path, field, _describe(kind), value)


def _is(value: Any, kind: Any) -> bool:
    args, origin = typing.get_args(kind), typing.get_origin(kind)
    if origin in (typing.Union, _UnionType):
        return any(_is(value, arg) for arg in args)
    if kind is type(None):
        return value is None
    if origin is dict:
        return isinstance(value, dict)
    if origin in (list, tuple):  # (JSON has lists only)
        return isinstance(value, list) and all(_is(v, args[0]) for v in value)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind is float:
        return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
    return isinstance(value, kind)


_UnionType = type(int | None)


def _describe(kind: Any) -> str:
    args, origin = typing.get_args(kind), typing.get_origin(kind)
    if origin in (typing.Union, _UnionType):
        return " or ".join(_describe(arg) for arg in args)
    if origin in (list, tuple):
        return f"a list of {_describe(args[0]).split(' ', 1)[1]}s"
    return {
        int: "an integer",
        float: "a finite number",
        bool: "true or false",
        str: "a string",
        dict: "an object",
        type(None): "null",
    }.get(kind, getattr(kind, "__name__", str(kind)))


def _non_negative(path: str, field: str, value: float) -> None:
    if value < 0:
        _fail(path, field, "a number >= 0", value)


def _fail(path: str, field: str, what: str, value: Any) -> typing.NoReturn:
    shown = json.dumps(value, default=str)
    raise ValueError(f"{path}: {field} must be {what}, got {shown[:60]}{'...' if len(shown) > 60 else ''}")
