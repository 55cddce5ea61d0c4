"""The program layer (after Launchpad): programs as graphs of nodes, handles, launchers,
supervision, address books and the RPC layer. It knows nothing of RL, and imports neither
gymnasium, JAX nor Reverb (the replay node imports Reverb when it runs)."""

from shoal.launch.programs.addressing import AddressBook, FileAddressBook
from shoal.launch.programs.launching import LAUNCHERS, launch
from shoal.launch.programs.nodes import (FunctionNode, NodeContext, ReplayNode, ServiceNode,
                                         current_context, should_stop)
from shoal.launch.programs.program import Handle, Node, Program, Resources
from shoal.launch.programs.supervision import ProgramFailed, ProgramRun

__all__ = ["AddressBook", "FileAddressBook", "FunctionNode", "Handle", "LAUNCHERS", "Node",
           "NodeContext", "Program", "ProgramFailed", "ProgramRun", "ReplayNode", "Resources",
           "ServiceNode", "current_context", "launch", "should_stop"]
