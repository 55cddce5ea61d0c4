"""The states a program's node goes through (``ProgramRun.states``; the rows of ``shoal status``),
and the ``Worker`` a node runs in.

Their own module, below ``supervision`` (which moves nodes between them) and the ``scaling`` and
``stopping`` mixins (which read them), so that none imports another's module.
"""

from __future__ import annotations

import enum
from typing import Any, Protocol

from shoal.launch.programs.program import Node


class NodeState(str, enum.Enum):  # noqa: UP042 -- StrEnum would change str(state) and f-strings
    PENDING = "pending"
    RUNNING = "running"
    RESTARTING = "restarting"
    REMOVING = "removing"
    REMOVED = "removed"
    DONE = "done"
    STOPPED = "stopped"
    KILLED = "killed"
    FAILED = "failed"


# A node in one of these may still run (or run again): it is not finished.
LIVE = (NodeState.PENDING, NodeState.RUNNING, NodeState.RESTARTING)


class Worker(Protocol):
    """What a node runs in (a thread, a process, a Ray actor; see the launchers), as the
    supervisor polls it."""

    node: Node
    log_path: str  # where the node's output goes
    managed_restarts: bool  # True: the engine restarts the node itself
    # optional: ``pending`` (bool: not placed yet), ``failure`` (str: why it failed, one line),
    # ``final`` (bool: it failed in a way no restart mends, e.g. an env that is not the run's)

    @property
    def restarts(self) -> int: ...  # restarts so far, if managed

    def start(self) -> None: ...
    def poll(self) -> int | None: ...  # exit code once the node ended for good
    def terminate(self) -> None: ...  # cooperative stop
    def kill(self) -> None: ...
    def result(self) -> Any: ...  # what the node's run() returned (once it exited with 0)
    def pid(self) -> int | None: ...  # its OS process on this machine, if any
