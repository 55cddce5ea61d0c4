"""A run's directory, below both runners: claiming it, and reading back the run it holds.

Both ``run_experiment`` and ``run_distributed_experiment`` claim their run directory the same
way (``claim_run_directory``): lock it, and either write ``config.json`` (a fresh run, which
refuses a directory holding another run's checkpoints) or check that its checkpoint can
continue this config (a resumed run). ``load_run`` reads a run's config and launch settings
back (``resuming.resume_experiment``, above both runners, continues it).
"""

from __future__ import annotations

import os
from typing import Any

from shoal.core.specs import EnvironmentSpec
from shoal.launch.experiments.checkpointing import check_resumable, keep_only_replay_checkpoint, read_run
from shoal.launch.experiments.config import ExperimentConfig, config_from_dict
from shoal.launch.experiments.launch_settings import LaunchSettings
from shoal.launch.experiments.run_files import check_config
from shoal.launch.experiments.rundir import RunDirectory, read_json

# What ``resume_experiment`` may change of a saved run (the rest is the run's own).
RESUMABLE_CHANGES = ("max_env_steps", "checkpoint_every_s", "progress", "progress_every_s", "track")


def claim_run_directory(config: ExperimentConfig, spec: EnvironmentSpec,
                        launch: LaunchSettings | None = None) -> RunDirectory:
    """Locks ``config.run_dir`` (one live run per directory). A fresh run refuses a directory
    that holds another run's checkpoints and writes its ``config.json`` (with ``launch``: how
    it was launched); a resumed one checks its checkpoint against ``config`` and ``spec``."""
    run_dir = RunDirectory(config.run_dir).lock()
    try:
        saved = read_run(config.run_dir)
        if config.resume:
            if saved is None:
                raise ValueError(f"run directory {config.run_dir!r} holds no checkpoint to resume")
            check_resumable(config.run_dir, saved, config.builder.name, spec)
            # Reverb loads its latest checkpoint: make that the one run.json names.
            keep_only_replay_checkpoint(os.path.join(config.run_dir, "checkpoints"), saved.get("replay_checkpoint"))
        else:
            if saved is not None:
                raise ValueError(f"run directory {config.run_dir!r} holds the checkpoints of an earlier run; "
                                 "continue it with --resume, or choose another --run-dir")
            run_dir.write_json("config.json", {**config.to_dict(), "launch": launch.record() if launch else None})
    except BaseException:
        run_dir.unlock()
        raise
    return run_dir


def load_run(run_dir: str, **changes: Any) -> tuple[ExperimentConfig, LaunchSettings | None]:
    """The config a run saved in ``run_dir`` (set to resume; ``changes`` among
    ``RESUMABLE_CHANGES`` applied) and its launch settings (``None``: one process).

    Both of the run's state files are checked against their schemas first (``run_files``):
    ``config.json``, and ``checkpoints/run.json`` if there is one, so a resume refuses a
    damaged or hand-edited one in a line before it does anything."""
    unknown = sorted(set(changes) - set(RESUMABLE_CHANGES))
    if unknown:
        raise ValueError(f"a resumed run keeps its saved settings; only {', '.join(RESUMABLE_CHANGES)} "
                         f"may change, not {', '.join(unknown)}")
    saved = read_json(os.path.join(run_dir, "config.json"), "the run's config")
    if saved is None:
        raise ValueError(f"{run_dir!r} is not a Shoal run directory (no config.json in it)")
    check_config(os.path.join(run_dir, "config.json"), saved)
    read_run(run_dir)  # (run.json's schema)
    launch = saved.get("launch")
    return (config_from_dict(saved, run_dir=run_dir, resume=True, **changes),
            LaunchSettings.from_record(launch) if launch else None)
