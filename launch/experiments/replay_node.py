"""``ReplayNode``: a Reverb replay server as a node of a program (the experiments' node kind;
the program layer knows nothing of Reverb).

``ReplayNode(make_tables, checkpoint_dir=None)`` runs a Reverb server with ``make_tables()``
(restoring the latest checkpoint in ``checkpoint_dir``, if any); a handle to it becomes a
``reverb.Client`` inside the nodes that take it. Reverb's server listens on every interface (its
API takes no host); its address is published like any node's.
"""

from __future__ import annotations

from typing import Any, Callable

from shoal.launch.programs.nodes import NodeContext
from shoal.launch.programs.program import Node


def _name(fn: Any) -> str:
    fn = getattr(fn, "func", fn)  # functools.partial
    return getattr(fn, "__qualname__", None) or type(fn).__name__


class ReplayNode(Node):
    kind = "replay"

    def __init__(self, make_tables: Callable[[], list], checkpoint_dir: str | None = None) -> None:
        super().__init__()
        self.make_tables, self.checkpoint_dir = make_tables, checkpoint_dir

    def describe_target(self) -> str:
        return f"reverb({_name(self.make_tables)})"

    def make_client(self, address: str, ctx: NodeContext) -> Any:
        from shoal.replay import make_replay_client

        return make_replay_client(address)

    def run(self, ctx: NodeContext) -> None:
        from shoal.replay import ReplayServer

        server = ReplayServer(self.make_tables(), checkpoint_dir=self.checkpoint_dir)
        ctx.publish(server.port)
        try:
            ctx.stop_event.wait()
        finally:
            server.stop()
