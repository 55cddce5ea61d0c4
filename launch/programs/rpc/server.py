"""The RPC server: one generic gRPC method, ``/shoal.Rpc/Call``, dispatching to an object.

A request is ``encode({"method": name, "args": [...], "kwargs": {...}})``; the reply is
``encode(result)``. Failures come back as gRPC status codes, and the server keeps serving:

* ``UNAUTHENTICATED`` -- a token is set and the call's ``shoal-token`` metadata differs;
* ``INVALID_ARGUMENT`` -- the request is not a valid frame or not a call record;
* ``UNIMPLEMENTED`` -- no such public method;
* ``UNKNOWN`` -- the method raised (the details name the exception);
* ``INTERNAL`` -- the result cannot be encoded.

Only public methods (no leading underscore) are callable, and never ``run``. The server binds
127.0.0.1 unless another host is given, and refuses any other interface without a token; port 0
lets the OS pick a free port (no races).
"""

from __future__ import annotations

import concurrent.futures
import hmac
import ipaddress
import traceback
from typing import Any

import grpc

from shoal.launch.programs.rpc.codec import CodecError, decode, encode

SERVICE = "shoal.Rpc"
METHOD = f"/{SERVICE}/Call"
TOKEN_KEY = "shoal-token"
CHANNEL_OPTIONS = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name
        return False


def public_methods(obj: Any) -> dict[str, Any]:
    names = [n for n in dir(obj) if not n.startswith("_") and n != "run"]
    return {n: getattr(obj, n) for n in names if callable(getattr(obj, n, None))}


class RpcServer:
    """Serves ``obj``'s public methods at ``address`` (``host:port``) once started."""

    def __init__(self, obj: Any, host: str = "127.0.0.1", port: int = 0, token: str | None = None,
                 max_workers: int = 16) -> None:
        if not is_loopback(host) and not token:
            raise ValueError(f"refusing to serve RPC on {host!r} without a token: every process "
                             "that can reach that interface could call this server (pass a token, "
                             "or bind 127.0.0.1)")
        self._methods = public_methods(obj)
        self._token = token.encode() if token else None
        self._server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers),
                                   options=CHANNEL_OPTIONS)
        handler = grpc.method_handlers_generic_handler(
            SERVICE, {"Call": grpc.unary_unary_rpc_method_handler(self._handle)})
        self._server.add_generic_rpc_handlers((handler,))
        self.port = self._server.add_insecure_port(f"{host}:{port}")
        if not self.port:
            raise OSError(f"could not bind an RPC server to {host}:{port}")
        self.address = f"{host}:{self.port}"

    def start(self) -> "RpcServer":
        self._server.start()
        return self

    def stop(self, grace_s: float = 1.0) -> None:
        self._server.stop(grace_s).wait(grace_s + 1.0)

    def _handle(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        if self._token is not None:
            sent = dict(context.invocation_metadata()).get(TOKEN_KEY, "")
            if not hmac.compare_digest(sent.encode(), self._token):
                context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong shoal-token")
        try:
            message = decode(request)
            name, args, kwargs = message["method"], message.get("args", []), message.get("kwargs", {})
            if not (isinstance(name, str) and isinstance(args, list) and isinstance(kwargs, dict)):
                raise CodecError("a call is {'method': str, 'args': list, 'kwargs': dict}")
        except (CodecError, KeyError, TypeError) as e:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"bad request: {e}")
        method = self._methods.get(name)
        if method is None:
            context.abort(grpc.StatusCode.UNIMPLEMENTED,
                          f"no public method {name!r}; available: {', '.join(sorted(self._methods))}")
        try:
            result = method(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 -- reported to the caller, the server keeps serving
            detail = "".join(traceback.format_exception_only(type(e), e)).strip()
            context.abort(grpc.StatusCode.UNKNOWN, f"{name} raised {detail}")
        try:
            return encode(result)
        except CodecError as e:
            context.abort(grpc.StatusCode.INTERNAL, f"{name} returned a value that cannot be sent: {e}")
