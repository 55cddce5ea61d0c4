"""``resume_experiment``: continues a run, above both runners (it picks the one the run was made
with, so neither runner's module imports the other's, nor ``runs`` either of them).
"""

from __future__ import annotations

from typing import Any

from shoal.launch.experiments.run_directory.checkpoints import read_run
from shoal.launch.experiments.run_directory.claim import load_run
from shoal.launch.experiments.runner import run_experiment


def resume_experiment(run_dir: str, **changes: Any) -> dict[str, Any]:
    """Continues the run in ``run_dir`` from its last checkpoint, with the runner (the compiled
    loop for a ``--launcher anakin`` run's checkpoint), launch settings and config it was made with (``changes``: a new ``max_env_steps``, ... among
    ``runs.RESUMABLE_CHANGES``); returns the run's result.

    Nothing only the directory names is imported or called (``runs.check_named_code``): an env
    factory, a ``module:EnvId``, an agent that is not built in or a Ray address its
    ``config.json`` records must be given again (``env_factory=``, ``env_id=``, ``agent=``,
    ``ray_address=``, each the run's own value), or the directory trusted (``trust_run_dir=True``)."""
    config, launch = load_run(run_dir, **changes)
    run = read_run(run_dir)
    if launch is None and isinstance(run, dict) and isinstance(run.get("anakin"), dict):  # (the compiled loop's)
        from shoal.launch.experiments.anakin import run_anakin  # lazy: anakin runs only

        return run_anakin(config)
    if launch is None:
        return run_experiment(config)
    from shoal.launch.experiments.distributed.launch import run_launched  # lazy: distributed only (grpc)

    return run_launched(config, launch)
