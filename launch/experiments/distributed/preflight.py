"""What a distributed run checks before it writes anything or starts a node, in one function
(``prepare``) that ``run_distributed_experiment`` and ``shoal train --dry-run`` both call: a dry
run refuses exactly what a run refuses (short of joining a Ray cluster, which only a run does).

This is where a distributed run's checks run, each once: the launch settings, the config's
settings, the environment spec (read off one single env the driver builds and closes, never
resetting it: no vector env), the program's graph against ``--resources`` and ``--ports``, and the agent against the env. The spec goes down to the nodes as an argument
(``program.program_graph``): no node builds an env to read it again.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple, cast

from shoal.agents.learner_memory import learner_bytes
from shoal.core.specs import EnvironmentSpec
from shoal.launch.experiments.config import ExperimentConfig
from shoal.launch.experiments.distributed.program import program_graph
from shoal.launch.experiments.distributed.settings import LaunchSettings, max_actors
from shoal.launch.experiments.run_directory.checkpoints import read_run
from shoal.launch.programs.launching import check_ports
from shoal.launch.programs.program import Program
from shoal.launch.programs.rpc.server import MAX_MESSAGE_ENV, max_message_bytes


class Prepared(NamedTuple):
    """A checked distributed run: its env spec, the checkpoint it resumes (or ``None``), the
    number of actors it starts with (a resumed run's own; autoscaled: within its bounds), its
    program (resources set) and its launch settings (with that number of actors, or the
    ``auto`` spec of an autoscaled run: resuming keeps the mode)."""

    spec: EnvironmentSpec
    saved: dict[str, Any] | None
    num_actors: int
    program: Program
    settings: LaunchSettings


def prepare(
    config: ExperimentConfig,
    settings: LaunchSettings,
    launched_at: float | None = None,
    actors_flag: str = "num_actors",
) -> Prepared:
    """Checks every setting of a distributed run (``ValueError``, one line, for the first bad
    one: the launch settings -- launcher, actors (named ``actors_flag``), ``params_via`` --,
    the config and the ``SHOAL_*`` variables, each ``resources`` group and that ``ports`` holds
    a port per server of the program, then the agent against the env, its step budget and the
    learner's memory) and builds its program. Reads the run's checkpoint when resuming; writes nothing. The learner's memory is
    checked against this machine's unless it runs on a Ray cluster (``ray_address``: its host
    is the cluster's choice); the cluster itself is not joined here."""
    settings.check(actors_flag)
    config.validate_settings()
    if config.run.dataset is not None or getattr(config.builder, "offline", False):
        raise ValueError(
            "a run from a dataset (run.dataset; bc, cql) runs in one process (run_experiment, shoal train without "
            f"--launcher), not under launcher {settings.launcher!r}"
        )
    if config.run.record_dataset is not None:
        raise ValueError(
            "--record-dataset (run.record_dataset) records a one-process run's actor (run_experiment, shoal train "
            f"without --launcher), not the actors of launcher {settings.launcher!r}"
        )
    saved = read_run(config.run.dir) if config.run.resume and config.run.dir else None
    bounds = settings.actor_bounds()  # (autoscaled: starts from MIN, or a resumed run's count within bounds)
    num_actors = bounds[0] if bounds else cast(int, settings.num_actors)  # (a count where not autoscaled)
    if saved and saved.get("actors"):  # as many actors as ran at the checkpoint
        num_actors = min(len(saved["actors"]), max_actors())
        if bounds:
            num_actors = min(max(num_actors, bounds[0]), bounds[1])
        else:
            settings = settings.replace(num_actors=num_actors)
    spec = config.environment_spec()  # (one single env: built, read, closed; no vector env)
    program = program_graph(config, spec, num_actors, launched_at, resume=saved)
    for group, wanted in settings.resources.items():
        program.set_resources(group, wanted)
    check_ports(program, settings.launcher, settings.ports)
    on_cluster = settings.launcher == "ray" and settings.ray_address
    config.validate_agent(spec, check_memory=not on_cluster)
    if settings.params_via == "rpc" or settings.launcher == "ray":
        _check_params_fit_rpc(config, spec)
    return Prepared(spec, saved, num_actors, program, settings)


def prepare_distributed(
    config: ExperimentConfig,
    num_actors: int = 4,
    launcher: str = "processes",
    *,
    resources: Mapping[str, Any] | None = None,
    ports: tuple[int, int] | None = None,
    params_via: str = "auto",
    ray_address: str | None = None,
    launched_at: float | None = None,
) -> Prepared:
    """``prepare`` with the launch settings as ``run_distributed_experiment``'s arguments."""
    settings = LaunchSettings(
        launcher=launcher,
        num_actors=num_actors,
        ray_address=ray_address,
        resources=dict(resources or {}),
        ports=ports,
        params_via=params_via,
    )
    return prepare(config, settings, launched_at)


def _check_params_fit_rpc(config: ExperimentConfig, spec: EnvironmentSpec) -> None:
    """Actors that read the learner's parameters over RPC need them within one message."""
    sizes = learner_bytes(config.builder, config.make_networks(spec))
    limit = max_message_bytes()
    if sizes is not None and sizes[1] > limit:
        raise ValueError(
            f"the learner's parameters ({sizes[1] / 2**20:,.1f} MiB) are larger than one RPC message "
            f"may be ({MAX_MESSAGE_ENV}={limit / 2**20:g}, at most 2047), and actors read them over RPC "
            "(--params-via rpc, or Ray): raise the limit, or choose smaller networks"
        )
