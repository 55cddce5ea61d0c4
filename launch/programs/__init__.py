"""The program layer (after Launchpad): programs as graphs of nodes, handles, launchers,
supervision, address books and the RPC layer. It knows nothing of RL and imports nothing of
Shoal's RL packages, nor gymnasium, JAX, Reverb or TensorFlow (the experiments' replay node
lives with the experiments)."""

from shoal.launch.programs.addressing import AddressBook, FileAddressBook
from shoal.launch.programs.launching import LAUNCHERS, launch
from shoal.launch.programs.nodes import FunctionNode, NodeContext, ServiceNode, current_context, should_stop
from shoal.launch.programs.program import Handle, Node, Program
from shoal.launch.programs.resources import Resources
from shoal.launch.programs.stopping import ProgramFailed
from shoal.launch.programs.supervision import NodeState, ProgramRun

__all__ = [
    "AddressBook",
    "FileAddressBook",
    "FunctionNode",
    "Handle",
    "LAUNCHERS",
    "Node",
    "NodeContext",
    "NodeState",
    "Program",
    "ProgramFailed",
    "ProgramRun",
    "Resources",
    "ServiceNode",
    "current_context",
    "launch",
    "should_stop",
]
