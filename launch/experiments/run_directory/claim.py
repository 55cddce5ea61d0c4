"""A run's directory, below both runners: claiming it, and reading back the run it holds.

Both ``run_experiment`` and ``run_distributed_experiment`` claim their run directory the same
way (``claim_run_directory``): lock it, and either write ``config.json`` (a fresh run, which
refuses a directory holding another run's checkpoints) or check that its checkpoint can
continue this config (a resumed run). ``load_run`` reads a run's config and launch settings
back (``resuming.resume_experiment``, above both runners, continues it).

A resume imports and calls nothing that only the run directory names (``check_named_code``):
whoever could write the directory, or handed it over, could otherwise make a resume run any
function (``"env_factory": "os:system"``). Of what ``config.json`` names, an env factory, a
``module:EnvId`` (it imports the module), an agent that is not built in (a plug-in's name or
``module:BuilderClass``) and a Ray cluster's address are used only if the resume names them
again, with the same value (``--env-factory``, ``--env``, ``--agent``, ``--ray-address``; the
``env_factory``, ``env_id``, ``agent``, ``ray_address`` arguments in Python), or trusts the
directory (``--trust-run-dir``; ``trust_run_dir=True``). Built-in agents and registered
gymnasium ids need neither. The directory itself must be writable by its owner alone, who must
be this user (``check_run_directory(..., resume=True)``). All of it is checked before anything
is imported or written.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
from typing import Any

from shoal.agents.builders import try_factories
from shoal.agents.registry import builtin_agents
from shoal.core.files import check_run_directory
from shoal.core.specs import EnvironmentSpec
from shoal.envs.env_sources import factory_path
from shoal.envs.jax_envs import is_jax_env
from shoal.launch.experiments.config import ExperimentConfig, config_from_dict
from shoal.launch.experiments.distributed.settings import LaunchSettings
from shoal.launch.experiments.run_directory.checkpoints import check_resumable, read_run
from shoal.launch.experiments.run_directory.config_record import flat_record
from shoal.launch.experiments.run_directory.directory import RunDirectory, read_json
from shoal.launch.experiments.run_directory.replay_checkpoints import (
    keep_only_replay_checkpoint,
    recover_committed_replay,
)
from shoal.launch.experiments.run_directory.schemas import check_config

# What ``resume_experiment`` may change of a saved run (the rest is the run's own).
RESUMABLE_CHANGES = (
    "max_env_steps",
    "checkpoint_every_s",
    "progress",
    "progress_every_s",
    "track",
    "callbacks",
    "record_dataset",  # (a resumed run records only where asked again, into a new directory)
)

# What a run's config.json may name that a resume would import, call or connect to (``agent``
# only where it is not built in, ``env_id`` only as module:EnvId), and the flag that names it
# again: the key is also the argument of ``load_run``/``resume_experiment`` that does.
NAMED_CODE = {"env_factory": "--env-factory", "env_id": "--env", "agent": "--agent", "ray_address": "--ray-address"}


def claim_run_directory(
    config: ExperimentConfig, spec: EnvironmentSpec, launch: LaunchSettings | None = None
) -> RunDirectory:
    """Locks ``config.run.dir`` (one live run per directory). A fresh run refuses a directory
    that holds another run's checkpoints and writes its ``config.json`` (with ``launch``: how
    it was launched); a resumed one checks its checkpoint against ``config`` and ``spec``.
    First, before anything is written, the agent's factories that build nothing heavy are tried
    (``shoal.agents.builders.try_factories``): a builder that fails there is one line."""
    try_factories(config.builder, spec, config.make_networks)
    directory = config.run.dir
    if directory is None:
        raise ValueError("claim_run_directory needs a run directory (config.run.dir), got None")
    run_dir = RunDirectory(directory).lock(resume=config.run.resume)
    try:
        saved = read_run(directory)
        if config.run.resume:
            if saved is None:
                raise ValueError(f"run directory {directory!r} holds no checkpoint to resume")
            recover_committed_replay(os.path.join(directory, "checkpoints"), saved.get("replay_checkpoint"))
            check_resumable(directory, saved, config.builder.name, spec)
            check_agent_settings(directory, config)
            # Reverb loads its latest checkpoint: make that the one run.json names.
            keep_only_replay_checkpoint(os.path.join(directory, "checkpoints"), saved.get("replay_checkpoint"))
        else:
            if saved is not None:
                raise ValueError(
                    f"run directory {directory!r} holds the checkpoints of an earlier run; "
                    "continue it with --resume, or choose another --run-dir"
                )
            run_dir.write_json("config.json", {**config.to_dict(), "launch": launch.record() if launch else None})
    except BaseException:
        run_dir.unlock()
        raise
    return run_dir


def check_agent_settings(directory: str, config: ExperimentConfig) -> None:
    """Raises ``ValueError`` (one line naming each setting) if ``config``'s agent settings differ
    from those the run saved in its ``config.json``: a resumed run keeps its own (``load_run``
    gives them; a config built anew, e.g. ``run_experiment(config.replace(resume=True, ...))``,
    could otherwise name another optimizer or network, whose state the checkpoint does not
    hold). A setting the saved file does not name (added to Shoal since) is its default; one
    that JSON cannot hold (a plug-in's function, written as its text) is not compared."""
    saved = read_json(os.path.join(directory, "config.json"), "the run's config")
    recorded = saved.get("agent_config") if isinstance(saved, dict) else None
    if not isinstance(recorded, dict):
        return
    agent_config: Any = config.builder.config  # (a dataclass)
    defaults = {f.name: _default(f) for f in dataclasses.fields(agent_config)}
    differ = []
    for key, value in dataclasses.asdict(agent_config).items():
        now, then = _as_json(value), _as_json(recorded[key] if key in recorded else defaults[key])
        if now is not _NOT_JSON and then is not _NOT_JSON and now != then:
            differ.append(f"{key} {json.dumps(then)} (config.json) vs {json.dumps(now)} (this config)")
    if differ:
        raise ValueError(
            f"a resumed run keeps its agent's settings, and {os.path.join(directory, 'config.json')} "
            f"differs: {', '.join(differ)}; resume with the saved config (shoal train --resume, or load_run)"
        )


_NOT_JSON = object()


def _default(field: dataclasses.Field) -> Any:
    """A dataclass field's default (``_NOT_JSON`` if it has none)."""
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return _NOT_JSON


def _as_json(value: Any) -> Any:
    """``value`` as JSON reads it back (tuples as lists), or ``_NOT_JSON`` if JSON cannot hold it."""
    try:
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError):
        return _NOT_JSON


def load_run(
    run_dir: str, trust_run_dir: bool = False, **changes: Any
) -> tuple[ExperimentConfig, LaunchSettings | None]:
    """The config a run saved in ``run_dir`` (set to resume; ``changes`` among
    ``RESUMABLE_CHANGES`` applied) and its launch settings (``None``: one process).

    ``changes`` may also name again what the run's config names among ``NAMED_CODE`` (the same
    value: a resumed run keeps its own), which lets the resume use it; ``trust_run_dir`` lets
    it use whatever the directory names (``check_named_code``). The directory is checked first
    (``check_run_directory``: this user's, writable by nobody else), then both of the run's
    state files against their schemas (``run_files``): ``config.json``, and
    ``checkpoints/run.json`` if there is one, so a resume refuses a damaged or hand-edited one
    in a line before it does anything."""
    named = {key: value for key in NAMED_CODE if (value := changes.pop(key, None)) is not None}
    changes.setdefault("record_dataset", None)  # (the first run's dataset directory is its own)
    unknown = sorted(set(changes) - set(RESUMABLE_CHANGES))
    if unknown:
        raise ValueError(
            f"a resumed run keeps its saved settings; only {', '.join(RESUMABLE_CHANGES)} "
            f"may change, not {', '.join(unknown)}"
        )
    check_run_directory(run_dir, resume=True)
    path = os.path.join(run_dir, "config.json")
    saved = read_json(path, "the run's config")
    if saved is None:
        raise ValueError(f"{run_dir!r} is not a Shoal run directory (no config.json in it)")
    if isinstance(saved, dict):  # (else check_config says what it is)
        check_named_code(path, flat_record(saved, path), named, trust_run_dir)  # (flat: either schema version)
    check_config(path, saved)
    read_run(run_dir)  # (run.json's schema)
    launch = saved.get("launch")
    return (
        config_from_dict(saved, run_dir=run_dir, resume=True, **changes),
        LaunchSettings.from_record(launch) if launch else None,
    )


def check_named_code(path: str, saved: dict[str, Any], named: dict[str, Any], trust_run_dir: bool) -> None:
    """Raises ``ValueError`` (one line) unless the code ``saved`` (the ``config.json`` at
    ``path``) names, ``NAMED_CODE``, is named again in ``named`` or ``trust_run_dir`` is set;
    a value in ``named`` that is not the run's is refused too. Reads ``saved`` only: nothing is
    imported (a field of the wrong type is ``check_config``'s to refuse, before any import).
    ``saved`` is in the flat layout of schema version 1 (``config_record.flat_record``)."""
    launch = saved.get("launch")
    recorded = {
        "env_factory": saved.get("env_factory"),
        "env_id": saved.get("env_id"),
        "agent": saved.get("agent"),
        "ray_address": launch.get("ray_address") if isinstance(launch, dict) else None,
    }
    for key, value in named.items():
        given = factory_path(value) if key == "env_factory" else value
        if given != recorded[key]:
            raise ValueError(
                f"{NAMED_CODE[key]} {given!r} is not the run's ({path} has {key} "
                f"{recorded[key]!r}): a resumed run keeps its own; give its value, or drop {NAMED_CODE[key]}"
            )
    if trust_run_dir:
        return
    for key, value in recorded.items():
        if not isinstance(value, str) or key in named:
            continue
        if key == "env_id" and (":" not in value or is_jax_env(value)) or key == "agent" and value in builtin_agents():
            continue  # (a registered gymnasium id, a gymnax id, a built-in agent: nothing of the directory's is imported)
        what = {
            "env_factory": "an env factory, which a resume would import and call",
            "env_id": "an env id that imports its module",
            "agent": "an agent that is not built in, which a resume would import",
            "ray_address": "a Ray cluster, which a resume would join",
        }[key]
        raise ValueError(
            f"{path} names {key} {value!r}, {what}; a resume runs nothing only its run directory "
            f"names: if it is yours, name it again ({NAMED_CODE[key]} {shlex.quote(value)}) or pass "
            "--trust-run-dir (trust_run_dir=True in Python)"
        )
