"""Launch: two houses, imports one way (experiments -> programs).

* ``shoal.launch.programs`` -- the program layer: programs, nodes, handles, launchers
  (threads, processes, Ray), supervision, address books, RPC. Knows nothing of RL.
* ``shoal.launch.experiments`` -- the RL runners: ``ExperimentConfig`` and its groups
  (``EnvConfig``, ``RunConfig``, ``EvaluationConfig``, ...), ``run_experiment`` (one
  process), ``run_distributed_experiment`` (a program of processes or Ray actors),
  ``resume_experiment``, ``make_distributed_program``, ``load_policy`` / ``evaluate_run`` /
  ``export_policy`` (a trained policy out of its run directory), the replay node, the evaluator, the ``shoal`` CLI.

The experiment names load on first use (they import JAX, gymnasium and Reverb), so that a node
process which needs none of them (or must set XLA flags first) starts fast.
"""

import importlib

from shoal.launch.programs import (
    FunctionNode,
    Handle,
    Program,
    ProgramFailed,
    ProgramRun,
    Resources,
    ServiceNode,
    current_context,
    launch,
    should_stop,
)

_LAZY = {
    "ExperimentConfig": "shoal.launch.experiments.config",
    **{
        group: "shoal.launch.experiments.config_groups"
        for group in (
            "EnvConfig",
            "RunConfig",
            "EvaluationConfig",
            "ReplayConfig",
            "TrackingConfig",
            "MultiAgentConfig",
        )
    },
    "run_experiment": "shoal.launch.experiments.runner",
    "run_distributed_experiment": "shoal.launch.experiments.distributed.launch",
    "resume_experiment": "shoal.launch.experiments.resuming",
    "make_distributed_program": "shoal.launch.experiments.distributed.program",
    "ReplayNode": "shoal.launch.experiments.distributed.replay_node",
    "load_policy": "shoal.launch.experiments.trained_policy",
    "evaluate_run": "shoal.launch.experiments.trained_policy",
    "export_policy": "shoal.launch.experiments.exporting",
    "TrainedPolicy": "shoal.launch.experiments.trained_policy",
}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'shoal.launch' has no attribute {name!r}")


__all__ = [
    "EnvConfig",
    "EvaluationConfig",
    "ExperimentConfig",
    "MultiAgentConfig",
    "ReplayConfig",
    "RunConfig",
    "TrackingConfig",
    "FunctionNode",
    "Handle",
    "Program",
    "ProgramFailed",
    "ProgramRun",
    "ReplayNode",
    "Resources",
    "ServiceNode",
    "TrainedPolicy",
    "current_context",
    "evaluate_run",
    "export_policy",
    "launch",
    "load_policy",
    "make_distributed_program",
    "resume_experiment",
    "run_distributed_experiment",
    "run_experiment",
    "should_stop",
]
