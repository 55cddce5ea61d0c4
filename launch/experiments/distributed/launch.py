"""``run_distributed_experiment``: the same experiment as ``run_experiment``, as a program of
processes (or threads, or Ray actors), with the same result.

It claims the run directory (lock, ``config.json`` with the launch settings), launches
``make_distributed_program``, and drives the run from this process (``driver.ProgramDriver``): it
prints the progress line, takes the run's checkpoints (every ``checkpoint_every_s``, and once
more while every node still runs when the program ends or is stopped) -- the learner node writes
its state and replay's, this process gathers each actor's and the evaluator's schedule and writes
``run.json`` -- and it puts the result together from the evaluator's result and every node's
summary, then writes ``result.json``. ``stop`` (e.g. set on SIGTERM) ends the run gracefully.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping
from typing import Any

from shoal.core.timing import process_seconds
from shoal.launch.experiments.config import ExperimentConfig
from shoal.launch.experiments.distributed.autoscale_loop import AutoscaleLoop, CpuRoom, RayRoom
from shoal.launch.experiments.distributed.driver import ProgramDriver
from shoal.launch.experiments.distributed.preflight import prepare
from shoal.launch.experiments.distributed.program import CPU_ENV
from shoal.launch.experiments.distributed.settings import LaunchSettings
from shoal.launch.experiments.interrupts import run_begins
from shoal.launch.experiments.run_directory.claim import claim_run_directory
from shoal.launch.experiments.tracking import start_tracking
from shoal.launch.programs import Resources, launch


def run_distributed_experiment(
    config: ExperimentConfig,
    num_actors: int | str = 4,
    launcher: str = "processes",
    *,
    resources: Mapping[str, Resources] | None = None,
    ray_address: str | None = None,
    ports: tuple[int, int] | None = None,
    params_via: str = "auto",
    stop: threading.Event | None = None,
    launched_at: float | None = None,
) -> dict[str, Any]:
    """Trains ``config`` as a distributed program until solved, out of budget, or ``stop`` is
    set (then the result has ``"terminated": stop.reason``, default ``"SIGTERM"``; stopped before
    its evaluator served, the result has no evaluation: ``num_evals`` 0); returns the result
    summary. A second ``stop.hurry`` (``interrupts.StopRequest``) kills every node at once.

    ``num_actors``: a count, or ``"auto"`` / ``"auto:MIN-MAX"``: the driver adds an actor while
    the learner waits for samples and the machine has room, and removes one while the actors
    are blocked on inserts (``shoal.launch.experiments.distributed.autoscale``); the result's
    ``actor_counts`` records each change and why.
    ``launcher``: ``"processes"``, ``"inprocess"`` or ``"ray"`` (``ray_address``: the cluster
    to join; default a local Ray). ``resources``: per group, what each node asks of Ray.
    ``ports``: ``(first, last)``, the ports the nodes' servers listen on (default: any free
    port; under Ray 47000-47099). ``params_via``: ``"auto"`` (shared memory for nodes on the
    learner's host, RPC for the others) or ``"rpc"`` (RPC for every node).
    ``launched_at``: Unix time ``wall_s`` counts from (default: now).

    Under Ray with a cluster (``ray_address``), the driver connects before anything is written
    (a cluster that refuses it is a ``ValueError``), and ``config.run.dir`` must be on storage
    every host of the cluster sees (checked; a ``ValueError`` otherwise).
    """
    settings = LaunchSettings(
        launcher=launcher,
        num_actors=num_actors,
        ray_address=ray_address,
        resources=dict(resources or {}),
        ports=ports,
        params_via=params_via,
    )
    return run_launched(config, settings, stop=stop, launched_at=launched_at)


def run_launched(
    config: ExperimentConfig,
    settings: LaunchSettings,
    *,
    stop: threading.Event | None = None,
    launched_at: float | None = None,
    actors_flag: str = "num_actors",
) -> dict[str, Any]:
    """``run_distributed_experiment`` with its launch as one ``LaunchSettings`` (the CLI's and a
    resumed run's way in; ``actors_flag``: how an error names ``num_actors``). Everything is
    checked once, by ``preflight.prepare``, before anything is written."""
    launched_at = launched_at or time.time()
    # This process and the nodes it starts (which inherit its environment) share the machine's
    # accelerator with the learner: none of them takes 75% of its memory up front.
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    spec, saved, num_actors, program, settings = prepare(
        config, settings, launched_at, actors_flag
    )  # (what --dry-run checks too)
    if settings.launcher == "ray":
        _join_ray(settings.ray_address, config.run.dir)
    run_begins()  # (from here a signal stops the program instead of ending this process: interrupts)
    run_dir = claim_run_directory(config, spec, settings) if config.run.dir else None
    tracker, result = None, None
    try:
        tracker = start_tracking(config)
        driver = ProgramDriver(
            config, spec, saved, launched_at, autoscale=_autoscale(settings, num_actors, launched_at)
        )
        reader_env = {**CPU_ENV, "SHOAL_PARAMS_VIA": settings.params_via}
        run = launch(
            program,
            settings.launcher,
            run_dir=config.run.dir,
            ray_address=settings.ray_address,
            ports=settings.ports,
            group_env={"actor": reader_env, "evaluator": reader_env},
            before_stop=driver.last_checkpoint,
        )
        result = driver.follow(run, stop)
        result.update(launcher=settings.launcher, process_s=round(process_seconds(), 3))
        if run_dir is not None:
            run_dir.write_json("result.json", result)
    finally:
        if tracker is not None:
            tracker.close(result, stop)
        if run_dir is not None:
            run_dir.unlock()
    return result


def _autoscale(settings: LaunchSettings, num_actors: int, launched_at: float):
    """The driver's autoscale loop for ``num_actors="auto..."`` (``None`` for a fixed count)."""
    bounds = settings.actor_bounds()
    if bounds is None:
        return None

    room = RayRoom() if settings.launcher == "ray" else CpuRoom()
    return AutoscaleLoop(bounds, num_actors, room, started_at=launched_at)


def _join_ray(ray_address: str | None, run_dir: str | None) -> None:
    """Connects to Ray (errors as one ``ValueError``) and, on a cluster, checks that every host
    sees ``run_dir``: both before anything is written."""
    try:
        from shoal.launch.programs.ray.cluster import check_shared_directory, connect  # lazy: optional extra (ray)
        from shoal.launch.programs.ray.launcher import peer_timeout_s  # lazy: optional extra (ray)
    except ImportError:
        raise ValueError(
            "the Ray launcher needs the 'ray' extra, which is not installed; run "
            "pip install -e '.[ray]' (from the Shoal repository)"
        ) from None
    peer_timeout_s()  # (SHOAL_PEER_TIMEOUT_S checked)
    connect(ray_address)
    if ray_address and run_dir:
        check_shared_directory(run_dir)
