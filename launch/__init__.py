"""Launch: programs of nodes, launchers, experiment configs, the runners, and the CLI.

The experiment runners import JAX, gymnasium and Reverb; they load on first use, so that a node
process which needs none of them (or must set XLA flags first) starts fast.
"""

from shoal.launch.launchers import ProgramFailed, ProgramRun, launch
from shoal.launch.nodes import FunctionNode, ReplayNode, ServiceNode, current_context, should_stop
from shoal.launch.program import Handle, Program

_LAZY = {"ExperimentConfig": "shoal.launch.experiment", "run_experiment": "shoal.launch.experiment",
         "make_distributed_program": "shoal.launch.distributed"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'shoal.launch' has no attribute {name!r}")


__all__ = ["ExperimentConfig", "FunctionNode", "Handle", "Program", "ProgramFailed", "ProgramRun",
           "ReplayNode", "ServiceNode", "current_context", "launch", "make_distributed_program",
           "run_experiment", "should_stop"]
