"""What a distributed run checks before it writes anything or starts a node, in one function
that ``run_distributed_experiment`` and ``shoal train --dry-run`` both call: a dry run refuses
exactly what a run refuses (short of joining a Ray cluster, which only a run does).
"""

from __future__ import annotations

from typing import Any, Mapping, NamedTuple

from shoal.core.specs import EnvironmentSpec
from shoal.launch.experiments.config import ExperimentConfig
from shoal.launch.programs.program import Program


class Prepared(NamedTuple):
    """A checked distributed run: its env spec, the checkpoint it resumes (or ``None``), its
    number of actors (a resumed run's own) and its program (resources set)."""

    spec: EnvironmentSpec
    saved: dict[str, Any] | None
    num_actors: int
    program: Program


def prepare_distributed(config: ExperimentConfig, num_actors: int = 4, launcher: str = "processes", *,
                        resources: Mapping[str, Any] | None = None, ports: tuple[int, int] | None = None,
                        params_via: str = "auto", ray_address: str | None = None,
                        launched_at: float | None = None) -> Prepared:
    """Checks every setting of a distributed run (``ValueError``, one line, for the first bad
    one: the config, the ``SHOAL_*`` variables and the learner's memory, the launcher, the
    actors, each ``resources`` group, ``params_via``, and that ``ports`` holds a port per
    server) and builds its program. Reads the run's checkpoint when resuming; writes nothing.
    The learner's memory is checked against this machine's unless it runs on a Ray cluster
    (``ray_address``: its host is the cluster's choice); the cluster itself is not joined here."""
    from shoal.launch.experiments.checkpointing import read_run
    from shoal.launch.experiments.distributed import PARAMS_VIA, check_num_actors, max_actors
    from shoal.launch.experiments.program import make_distributed_program
    from shoal.launch.programs import LAUNCHERS, Resources
    from shoal.launch.programs.launching import check_ports

    config.validate()
    if launcher not in LAUNCHERS:
        raise ValueError(f"unknown launcher {launcher!r}; choose one of {', '.join(LAUNCHERS)}")
    check_num_actors(num_actors, launcher)
    if params_via not in PARAMS_VIA:
        raise ValueError(f"params_via must be one of {', '.join(PARAMS_VIA)}, got {params_via!r}")
    saved = read_run(config.run_dir) if config.resume and config.run_dir else None
    if saved and saved.get("actors"):  # as many actors as ran at the checkpoint
        num_actors = min(len(saved["actors"]), max_actors())
    program = make_distributed_program(config, num_actors, launched_at, resume=saved)
    for group, wanted in (resources or {}).items():
        if not isinstance(wanted, Resources):
            raise ValueError(f"resources[{group!r}] must be a Resources, got {wanted!r}")
        program.set_resources(group, wanted)
    check_ports(program, launcher, ports)
    spec = config.environment_spec()
    # (the agent against the env: its settings, its budget, its memory where it runs here)
    config.validate(spec, check_memory=not (launcher == "ray" and ray_address))
    if params_via == "rpc" or launcher == "ray":
        _check_params_fit_rpc(config, spec)
    return Prepared(spec, saved, num_actors, program)


def _check_params_fit_rpc(config: ExperimentConfig, spec: EnvironmentSpec) -> None:
    """Actors that read the learner's parameters over RPC need them within one message."""
    from shoal.agents.memory import learner_bytes
    from shoal.launch.programs.rpc.server import MAX_MESSAGE_ENV, max_message_bytes

    sizes = learner_bytes(config.builder, config.make_networks(spec))
    limit = max_message_bytes()
    if sizes is not None and sizes[1] > limit:
        raise ValueError(f"the learner's parameters ({sizes[1] / 2**20:,.1f} MiB) are larger than one RPC message "
                         f"may be ({MAX_MESSAGE_ENV}={limit / 2**20:g}, at most 2047), and actors read them over RPC "
                         "(--params-via rpc, or Ray): raise the limit, or choose smaller networks")
