"""Node kinds, and the context a node executes in.

* ``ServiceNode(factory, *args)`` builds ``factory(*args)`` (handles dereferenced), serves its
  public methods over RPC, and runs its ``run()`` if it has one (else serves until stopped);
  what ``run()`` returns is the node's result.
* ``FunctionNode(fn, *args)`` runs ``fn(*args)``; its return value is the node's result, and a
  program ends when all its function nodes (and service nodes made with ``ends_program=True``)
  have returned.

Other kinds subclass ``shoal.launch.programs.program.Node`` (e.g. the experiments' Reverb
replay node): a ``run(ctx)`` and a ``make_client(address, ctx)``.

Servers bind port 0 (the OS picks a free port: no races) on ``ctx.bind_host``, or the first free
port of ``ctx.ports`` (a range a firewall can allow: the Ray launcher's default), and publish
``ctx.advertise_host:port`` in the launch's address book (``shoal.launch.programs.addressing``);
a handle is dereferenced by looking that address up (with a timeout) and connecting. Node code
can ask ``current_context().should_stop()`` in its loops.
"""

from __future__ import annotations

import dataclasses
import socket
import threading
from collections.abc import Callable, Sequence
from typing import Any

from shoal.launch.programs.addressing import AddressBook
from shoal.launch.programs.program import Handle, Node, dereference

_local = threading.local()
_process_context: NodeContext | None = None


@dataclasses.dataclass
class NodeContext:
    """Where and how a node runs: its address book, the RPC token, the interface its servers
    bind and the host they advertise, and the event that asks it to stop.

    ``ready`` turns true once the node has started its work: a server node when it publishes
    its address, a function node when its function starts. A node asked to stop before that has
    nothing to save: its process may end at once instead of finishing its setup first.
    """

    label: str
    group: str
    address_book: AddressBook
    token: str | None = None
    bind_host: str = "127.0.0.1"
    advertise_host: str = "127.0.0.1"
    stop_event: threading.Event = dataclasses.field(default_factory=threading.Event)
    connect_timeout_s: float = 120.0
    start_count: int = 1  # 1 the first time the node starts, 2 after its first restart, ...
    ports: tuple[int, int] | None = None  # (first, last): the ports servers may listen on
    ready: bool = False
    on_ready: Callable[[], None] | None = None  # called (in the node's thread) when it turns ready

    def serve(self, make_server: Callable[[int], Any], what: str = "server") -> Any:
        """``make_server(port)`` on port 0 (any), or on the first port of ``ports`` that is free
        (it raises ``OSError`` when it cannot bind); raises ``OSError`` naming the range when
        every port of it is taken."""
        if self.ports is None:
            return make_server(0)
        first, last = self.ports
        for port in range(first, last + 1):
            if not port_is_free(self.bind_host, port):
                continue
            try:
                return make_server(port)
            except OSError:  # taken since the check: the next one
                continue
        raise OSError(
            f"{self.label}: no free port for its {what} in {first}-{last} on {self.bind_host} "
            "(widen the range: --ports FIRST-LAST)"
        )

    def should_stop(self) -> bool:
        return self.stop_event.is_set()

    def resolve(self, handle: Handle) -> Any:
        address = self.address_book.lookup(handle.node.label, self.connect_timeout_s)
        return handle.node.make_client(address, self)

    def deref(self, value: Any) -> Any:
        return dereference(value, self.resolve)

    def publish(self, port: int) -> str:
        address = f"{self.advertise_host}:{port}"
        self.address_book.publish(self.label, address)
        self.set_ready()
        return address

    def set_ready(self) -> None:
        if not self.ready:
            self.ready = True
            if self.on_ready is not None:
                self.on_ready()


def port_is_free(host: str, port: int) -> bool:
    """Whether ``host:port`` can be bound now (without SO_REUSEPORT, so that a port some other
    server shares with SO_REUSEPORT counts as taken)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def set_context(ctx: NodeContext, process_wide: bool = False) -> None:
    global _process_context
    _local.ctx = ctx
    if process_wide:
        _process_context = ctx


def current_context() -> NodeContext | None:
    """The context of the node running in this thread (or process), or ``None`` outside one."""
    return getattr(_local, "ctx", None) or _process_context


def should_stop() -> bool:
    ctx = current_context()
    return ctx is not None and ctx.should_stop()


def _name(fn: Any) -> str:
    fn = getattr(fn, "func", fn)  # functools.partial
    return getattr(fn, "__qualname__", None) or type(fn).__name__


class ServiceNode(Node):
    """``factory(*args, **kwargs)`` served over RPC: all its public methods, or only ``methods``
    (serve what the node's clients need, no more)."""

    kind = "service"

    def __init__(
        self,
        factory: Callable[..., Any],
        *args: Any,
        methods: Sequence[str] | None = None,
        ends_program: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.factory, self.methods, self.ends_program = factory, methods, ends_program

    def describe_target(self) -> str:
        return _name(self.factory)

    def make_client(self, address: str, ctx: NodeContext) -> Any:
        from shoal.launch.programs.rpc import RpcClient  # lazy: grpc, only where a node is served or called

        return RpcClient(address, token=ctx.token)

    def run(self, ctx: NodeContext) -> Any:
        from shoal.launch.programs.rpc import RpcServer  # lazy: grpc, only where a node is served or called

        obj = self.factory(*ctx.deref(self.args), **ctx.deref(self.kwargs))
        server = ctx.serve(
            lambda port: RpcServer(obj, host=ctx.bind_host, port=port, token=ctx.token, methods=self.methods),
            "RPC server",
        ).start()
        ctx.publish(server.port)
        try:
            if callable(getattr(obj, "run", None)):
                return obj.run()
            ctx.stop_event.wait()
        finally:
            server.stop()


class FunctionNode(Node):
    kind = "function"
    ends_program = True

    def __init__(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fn = fn

    def describe_target(self) -> str:
        return _name(self.fn)

    def run(self, ctx: NodeContext) -> Any:
        args, kwargs = ctx.deref(self.args), ctx.deref(self.kwargs)
        ctx.set_ready()
        return self.fn(*args, **kwargs)
