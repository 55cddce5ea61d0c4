"""``make_distributed_program``: any agent builder as a program of replay, counter, learner,
N actors and an evaluator (the node bodies are in ``shoal.launch.experiments.distributed.learner_worker`` and ``.workers``).

* ``replay``  -- a Reverb server with the builder's tables (restoring the run's checkpoint).
* ``counter`` -- a ``Counter`` service; actors add ``env_steps`` (and their own
  ``env_steps_actor_i``), the learner ``learner_steps`` (and ``stale_batches_dropped``, for an
  on-policy agent whose batches lag too far).
* ``learner`` -- trains as fast as the table's rate limiter allows and serves ``get_variables``
  (its cached host copy, with a version) over RPC and shared memory; in a self-play run, also
  its snapshot pool (``snapshot_versions``, ``snapshot``).
* ``actor_i`` -- (group ``actor``: restartable, scalable while running) steps its own vector env,
  writes to replay, pulls parameters asynchronously every ``variable_update_period`` steps.
* ``evaluator`` -- evaluates every ``eval_every`` env steps (counted over all actors) and ends
  the program when the target return is reached or the step budget is spent.

Replay, counter and evaluator are colocated with the learner (``Program.colocate``): on a
cluster they run on the learner's machine unless given resources of their own.
"""

from __future__ import annotations

import functools
import os
from typing import Any

from shoal.core.counting import Counter
from shoal.core.specs import EnvironmentSpec
from shoal.launch.experiments.config import ExperimentConfig
from shoal.launch.experiments.distributed.evaluator_worker import EvaluatorWorker
from shoal.launch.experiments.distributed.learner_worker import LearnerWorker
from shoal.launch.experiments.distributed.replay_node import ReplayNode
from shoal.launch.experiments.distributed.workers import ActorWorker
from shoal.launch.programs.nodes import ServiceNode
from shoal.launch.programs.program import Program
from shoal.replay.tables import TableSpec

# Actors and the evaluator act on the CPU with one XLA thread each; the learner keeps the accelerators.
CPU_ENV = {
    "JAX_PLATFORMS": "cpu",
    "CUDA_VISIBLE_DEVICES": "",
    "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1",
}


def make_distributed_program(
    config: ExperimentConfig,
    num_actors: int = 4,
    launched_at: float | None = None,
    resume: dict[str, Any] | None = None,
) -> Program:
    """The program graph for ``config``, as an entry of the Python API: the config is validated
    first (bad settings raise here, before launch) and its env spec read off one single env
    (built, never reset: ``config.environment_spec``).
    (``run_distributed_experiment`` checks and reads these once itself, ``preflight.prepare``,
    and builds the graph with ``program_graph``.)

    ``launched_at``: Unix time the run counts its ``wall_s`` from (default: the evaluator's
    start). ``resume``: the ``run.json`` of the checkpoint to continue from (each node gets
    its part of it), or ``None``.
    """
    config.validate_settings()
    if num_actors < 1:
        raise ValueError(f"num_actors must be >= 1, got {num_actors}")
    spec = config.environment_spec()
    config.validate_agent(spec)
    return program_graph(config, spec, num_actors, launched_at, resume)


def program_graph(
    config: ExperimentConfig,
    spec: EnvironmentSpec,
    num_actors: int,
    launched_at: float | None = None,
    resume: dict[str, Any] | None = None,
) -> Program:
    """The program graph of a checked ``config`` whose env has ``spec`` (validates nothing,
    builds no env, no network): each node gets ``spec`` as an argument; replay's tables take
    their extras from ``builder.extras_spec`` (declared, no networks) where replay runs."""
    builder = config.builder
    resume = resume or {}
    program = Program(builder.name)
    checkpoints = os.path.join(config.run.dir, "checkpoints", "replay") if config.run.dir else None
    tables = _replay_tables(builder, spec)
    replay = program.add_node(
        ReplayNode(
            tables,
            checkpoint_dir=checkpoints,
            checkpoint=resume.get("replay_checkpoint"),
            backend=config.replay_backend(),
            seed=config.run.seed,
        ),
        label="replay",
    )
    # Each service serves what its clients call, no more (e.g. no remote Counter.restore).
    counter = program.add_node(
        ServiceNode(Counter, resume.get("counter"), methods=("increment", "get_counts")), label="counter"
    )
    learner = program.add_node(
        ServiceNode(
            LearnerWorker,
            config,
            spec,
            replay,
            counter,
            resume or None,
            methods=(
                "get_variables",
                "shared_params",
                "version",
                "checkpoint",
                "timing",
                "snapshot_versions",
                "snapshot",
            ),
        ),
        label="learner",
    )
    actors = resume.get("actors") or {}
    program.add_group(
        "actor",
        functools.partial(_actor_node, config, spec, replay, learner, counter, actors),
        num_actors,
        restartable=True,
    )
    program.add_node(
        ServiceNode(
            EvaluatorWorker,
            config,
            learner,
            counter,
            launched_at,
            resume.get("evaluator"),
            methods=("save", "progress"),
            ends_program=True,
        ),
        label="evaluator",
    )
    # On a cluster, the services the learner talks to all the time run on its machine (give a
    # group --resources to let the engine place it instead).
    program.colocate(("replay", "counter", "evaluator"), with_node="learner")
    return program


def _actor_node(
    config: ExperimentConfig, spec: EnvironmentSpec, replay, learner, counter, resumes: dict[str, Any], index: int
) -> ServiceNode:
    return ServiceNode(
        ActorWorker,
        config,
        spec,
        index,
        replay,
        learner,
        counter,
        resumes.get(f"actor_{index}"),
        methods=("save", "timing"),
    )


def _replay_tables(builder, spec: EnvironmentSpec):
    """The replay node's tables: the ``TableSpec``s themselves, made here (plain data: the node
    then unpickles no agent module, and starts without JAX or TensorFlow); or, where the agent
    builds ``reverb.Table``s (not picklable), its factory, called in the node."""
    tables = builder.make_replay_tables(spec)
    if all(isinstance(table, TableSpec) for table in tables):
        return tables
    return functools.partial(builder.make_replay_tables, spec)
