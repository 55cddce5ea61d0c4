"""``ReplayNode``: a Reverb replay server as a node of a program (the experiments' node kind;
the program layer knows nothing of Reverb).

``ReplayNode(tables, checkpoint_dir=None, checkpoint=None)`` runs a Reverb server of ``tables``
(``shoal.replay.TableSpec``s, or a function that makes the tables in the node) (restoring the latest checkpoint in ``checkpoint_dir``, if any); a handle to it
becomes a ``reverb.Client`` inside the nodes that take it. Reverb's server listens on every
interface (its API takes no host), on a port of the launch's range if it has one
(``NodeContext.ports``); its address is published like any node's.

``checkpoint``: the name of the Reverb checkpoint a resumed run's ``run.json`` names. The node
refuses to start if that checkpoint is not in ``checkpoint_dir`` where it runs (e.g. a run
directory that is not shared between the hosts of a cluster: the replay would otherwise start
empty without a word). (Every other checkpoint there was removed by the resume, so Reverb,
which restores the newest one it finds, restores this one.)
"""

from __future__ import annotations

import os
import socket
from typing import Any, Callable, Sequence

from shoal.launch.programs.nodes import NodeContext
from shoal.launch.programs.program import Node


def _name(fn: Any) -> str:
    fn = getattr(fn, "func", fn)  # functools.partial
    return getattr(fn, "__qualname__", None) or type(fn).__name__


class ReplayNode(Node):
    kind = "replay"

    def __init__(self, tables: Sequence[Any] | Callable[[], list], checkpoint_dir: str | None = None,
                 checkpoint: str | None = None) -> None:
        super().__init__()
        self.tables, self.checkpoint_dir, self.checkpoint = tables, checkpoint_dir, checkpoint

    def make_tables(self) -> list:
        return self.tables() if callable(self.tables) else list(self.tables)

    def describe_target(self) -> str:
        if callable(self.tables):
            return f"reverb({_name(self.tables)})"
        return f"reverb({', '.join(table.name for table in self.tables)})"

    def make_client(self, address: str, ctx: NodeContext) -> Any:
        from shoal.replay import make_replay_client

        return make_replay_client(address)

    def run(self, ctx: NodeContext) -> None:
        from shoal.replay import ReplayServer

        if self.checkpoint:
            self._check_checkpoint()
        server = ctx.serve(lambda port: ReplayServer(self.make_tables(), port=port or None,
                                                     checkpoint_dir=self.checkpoint_dir), "replay server")
        ctx.publish(server.port)
        try:
            ctx.stop_event.wait()
        finally:
            server.stop()

    def _check_checkpoint(self) -> None:
        if not os.path.isdir(os.path.join(self.checkpoint_dir or "", self.checkpoint)):
            raise RuntimeError(f"the replay checkpoint {self.checkpoint!r} that run.json names is not in "
                               f"{self.checkpoint_dir} on host {socket.gethostname()}: the replay would start "
                               "empty; on a cluster, --run-dir must be storage every host mounts")
