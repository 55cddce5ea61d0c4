"""Launch: two houses, imports one way (experiments -> programs).

* ``shoal.launch.programs`` -- the program layer: programs, nodes, handles, launchers
  (threads, processes, Ray), supervision, address books, RPC. Knows nothing of RL.
* ``shoal.launch.experiments`` -- the RL runners: ``ExperimentConfig``, ``run_experiment``,
  ``make_distributed_program``, the evaluator, the ``shoal`` CLI.

The experiment names load on first use (they import JAX, gymnasium and Reverb), so that a node
process which needs none of them (or must set XLA flags first) starts fast.
"""

from shoal.launch.programs import (FunctionNode, Handle, Program, ProgramFailed, ProgramRun,
                                   ReplayNode, Resources, ServiceNode, current_context, launch,
                                   should_stop)

_LAZY = {"ExperimentConfig": "shoal.launch.experiments.config",
         "run_experiment": "shoal.launch.experiments.runner",
         "make_distributed_program": "shoal.launch.experiments.distributed"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'shoal.launch' has no attribute {name!r}")


__all__ = ["ExperimentConfig", "FunctionNode", "Handle", "Program", "ProgramFailed", "ProgramRun",
           "ReplayNode", "Resources", "ServiceNode", "current_context", "launch",
           "make_distributed_program", "run_experiment", "should_stop"]
