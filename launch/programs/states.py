"""The states a program's node goes through (``ProgramRun.states``; the rows of ``shoal status``).

Their own module, below both ``supervision`` (which moves nodes between them) and ``scaling``
(which reads them), so that neither imports the other's module.
"""

from __future__ import annotations

import enum


class NodeState(str, enum.Enum):
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
