"""``ReplayNode``: a replay server as a node of a program (the experiments' node kind; the
program layer knows nothing of replay).

``ReplayNode(tables, checkpoint_dir=None, checkpoint=None, backend=None, seed=0)`` runs a
replay server of ``tables`` (``shoal.replay.TableSpec``s, or a function that makes the tables in
the node), restoring the latest checkpoint in ``checkpoint_dir``, if any, on a port of the
launch's range if it has one (``NodeContext.ports``); its address is published like any node's.
``backend``: ``"reverb"`` or ``"native"`` (``None``: this Python's default, ``shoal.replay.backends``).

* ``backend="reverb"``: Reverb's server, which listens on every interface (its API takes no
  host); a handle becomes a ``ReverbClient`` inside the nodes that take it.
* ``backend="native"``: a ``NativeReplayServer`` (sampling seeded from ``seed``) served by
  Shoal's RPC layer on the launch's bind host (loopback unless the user chose another, and then
  only with the launch's token), exactly its ``SERVICE_METHODS``; a handle becomes a
  ``NativeReplayClient`` over an RPC client with the launch's token, whose bulk arrays (steps
  written, batches sampled) go through shared memory when it runs on the server's host
  (``shoal.core.shared_memory``; ``SHOAL_REPLAY_VIA=rpc``: always RPC).

``checkpoint``: the name of the Reverb checkpoint a resumed run's ``run.json`` names. The node
refuses to start if that checkpoint is not in ``checkpoint_dir`` where it runs (e.g. a run
directory that is not shared between the hosts of a cluster: the replay would otherwise start
empty without a word). (Every other checkpoint there was removed by the resume, so Reverb,
which restores the newest one it finds, restores this one.)
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Sequence
from typing import Any, cast

from shoal.core.environment_variables import value
from shoal.launch.programs.nodes import NodeContext
from shoal.launch.programs.program import Node

NATIVE_CALL_TIMEOUT_S = 180.0
NATIVE_WORKERS = 64  # (threads serving calls: an insert or a sample may wait on the rate limiter)


def _name(fn: Any) -> str:
    fn = getattr(fn, "func", fn)  # functools.partial
    return getattr(fn, "__qualname__", None) or type(fn).__name__


def _backends() -> Any:
    """``shoal.replay.backends``, imported where replay is served or used (it imports gymnasium): a
    node that only passes a replay handle on (the counter) loads no backend."""
    from shoal.replay import backends  # lazy: a handle's holder loads no backend

    return backends


class ReplayNode(Node):
    kind = "replay"

    def __init__(
        self,
        tables: Sequence[Any] | Callable[[], list],
        checkpoint_dir: str | None = None,
        checkpoint: str | None = None,
        backend: str | None = None,
        seed: int = 0,
    ) -> None:
        super().__init__()
        self.tables, self.checkpoint_dir, self.checkpoint = tables, checkpoint_dir, checkpoint
        self.backend, self.seed = _backends().check_backend(backend), seed

    def make_tables(self) -> list:
        return self.tables() if callable(self.tables) else list(self.tables)

    def describe_target(self) -> str:
        if callable(self.tables):
            return f"{self.backend}({_name(self.tables)})"
        return f"{self.backend}({', '.join(table.name for table in self.tables)})"

    def make_client(self, address: str, ctx: NodeContext) -> Any:
        from shoal.launch.programs.rpc import RpcClient  # lazy: grpc, only nodes that use replay

        # (native: calls wait server-side at most their own timeout, 120 s: the deadline is beyond it)
        return _backends().remote_client(
            self.backend,
            address,
            rpc=lambda: RpcClient(address, token=ctx.token, timeout_s=NATIVE_CALL_TIMEOUT_S),
            shared_memory=value("SHOAL_REPLAY_VIA") != "rpc",
        )

    def run(self, ctx: NodeContext) -> None:
        if self.checkpoint:
            self._check_checkpoint()
        if self.backend == "native":  # (served by Shoal's RPC layer, which replay does not import)
            return self._run_native(ctx)
        server = ctx.serve(
            lambda port: _backends().make_replay_server(
                self.make_tables(), "reverb", port=port or None, checkpoint_dir=self.checkpoint_dir
            ),
            "replay server",
        )
        ctx.publish(server.port)
        try:
            ctx.stop_event.wait()
        finally:
            server.stop()

    def _run_native(self, ctx: NodeContext) -> None:
        from shoal.launch.programs.rpc import RpcServer  # lazy: grpc, only nodes that use replay

        backends = _backends()

        replay = backends.make_replay_server(
            self.make_tables(), "native", checkpoint_dir=self.checkpoint_dir, seed=self.seed
        )
        server = ctx.serve(
            lambda port: RpcServer(
                replay,
                host=ctx.bind_host,
                port=port,
                token=ctx.token,
                methods=backends.NATIVE_SERVICE_METHODS,
                max_workers=NATIVE_WORKERS,
            ),
            "replay server",
        ).start()
        ctx.publish(server.port)
        try:
            ctx.stop_event.wait()
        finally:
            replay.stop()  # (wakes the calls waiting on a table)
            server.stop()

    def _check_checkpoint(self) -> None:
        if not os.path.isdir(os.path.join(self.checkpoint_dir or "", cast(str, self.checkpoint))):
            raise RuntimeError(
                f"the replay checkpoint {self.checkpoint!r} that run.json names is not in "
                f"{self.checkpoint_dir} on host {socket.gethostname()}: the replay would start "
                "empty; on a cluster, --run-dir must be storage every host mounts"
            )
