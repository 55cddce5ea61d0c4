"""The RPC server: one generic gRPC method, ``/shoal.Rpc/Call``, dispatching to an object.

A request is ``encode({"method": name, "args": [...], "kwargs": {...}})``; the reply is
``encode(result)``. Failures come back as gRPC status codes, and the server keeps serving:

* ``UNAUTHENTICATED`` -- a token is set and the call's ``shoal-token`` metadata differs. This
  is decided from the call's metadata *before its body is read* (the method is served as a
  client stream, which is the same on the wire as a unary call), so an unauthenticated caller
  cannot make the server hold a large message;
* ``RESOURCE_EXHAUSTED`` -- the request is larger than ``max_message_bytes``;
* ``INVALID_ARGUMENT`` -- the request is not a valid frame (see the codec's limits) or not a
  call record;
* ``UNIMPLEMENTED`` -- no such method is served;
* ``UNKNOWN`` -- the method raised (the details name the exception);
* ``INTERNAL`` -- the result cannot be encoded.

Only public methods (no leading underscore) are callable, never ``run``, and, when ``methods``
is given, only those (a service exposes what its clients need). The server binds 127.0.0.1
unless another host is given, and refuses any other interface without a token; port 0 lets the
OS pick a free port (no races).
"""

from __future__ import annotations

import concurrent.futures
import hmac
import ipaddress
import traceback
from collections.abc import Iterator, Sequence
from typing import Any, NoReturn

import grpc

from shoal.core.codec import CodecError, decode, encode
from shoal.core.environment_variables import value

SERVICE = "shoal.Rpc"
METHOD = f"/{SERVICE}/Call"
TOKEN_KEY = "shoal-token"
MAX_MESSAGE_ENV = "SHOAL_RPC_MAX_MESSAGE_MB"


def max_message_bytes() -> int:
    """The largest request or reply (default 256 MiB; ``SHOAL_RPC_MAX_MESSAGE_MB`` to change,
    in [1, 2047]: a bad value is a ``ValueError`` naming it)."""
    return int(value(MAX_MESSAGE_ENV) * 2**20)


def channel_options(limit: int | None = None) -> list[tuple[str, int]]:
    limit = max_message_bytes() if limit is None else limit
    return [("grpc.max_send_message_length", limit), ("grpc.max_receive_message_length", limit)]


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name
        return False


def public_methods(obj: Any, methods: Sequence[str] | None = None) -> dict[str, Any]:
    names = [n for n in dir(obj) if not n.startswith("_") and n != "run" and callable(getattr(obj, n, None))]
    if methods is not None:
        unknown = sorted(set(methods) - set(names))
        if unknown:
            raise ValueError(f"{type(obj).__name__} has no public method(s) {unknown} to serve")
        names = list(methods)
    return {n: getattr(obj, n) for n in names}


class RpcServer:
    """Serves ``obj``'s public methods (or just ``methods``) at ``address`` once started."""

    def __init__(
        self,
        obj: Any,
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | None = None,
        max_workers: int = 16,
        methods: Sequence[str] | None = None,
        max_message_bytes: int | None = None,
    ) -> None:
        if not is_loopback(host) and not token:
            raise ValueError(
                f"refusing to serve RPC on {host!r} without a token: every process "
                "that can reach that interface could call this server (pass a token, "
                "or bind 127.0.0.1)"
            )
        self._methods = public_methods(obj, methods)
        self._token = token.encode() if token else None
        self._server = grpc.server(
            concurrent.futures.ThreadPoolExecutor(max_workers),
            options=[*channel_options(max_message_bytes), ("grpc.so_reuseport", 0)],
        )  # (a taken port fails to bind)
        handler = grpc.method_handlers_generic_handler(
            SERVICE, {"Call": grpc.stream_unary_rpc_method_handler(self._handle)}
        )
        self._server.add_generic_rpc_handlers((handler,))
        try:
            self.port = self._server.add_insecure_port(f"{host}:{port}")
        except RuntimeError:  # (grpcio raises when it cannot bind)
            self.port = 0
        if not self.port:
            raise OSError(f"could not bind an RPC server to {host}:{port}")
        self.address = f"{host}:{self.port}"

    def start(self) -> RpcServer:
        self._server.start()
        return self

    def stop(self, grace_s: float = 1.0) -> None:
        self._server.stop(grace_s).wait(grace_s + 1.0)

    def _handle(self, requests: Iterator[bytes], context: grpc.ServicerContext) -> bytes:
        if self._token is not None:  # from the metadata, before the body is read
            sent = dict(context.invocation_metadata()).get(TOKEN_KEY, "")
            if not hmac.compare_digest(sent.encode(), self._token):
                _abort(context, grpc.StatusCode.UNAUTHENTICATED, "missing or wrong shoal-token")
        request = next(requests, None)
        try:
            if request is None:
                raise CodecError("no request message")
            message = decode(request)
            if not isinstance(message, dict):
                raise CodecError(f"a call is a dict, not {type(message).__name__}")
            name, args, kwargs = message["method"], message.get("args", []), message.get("kwargs", {})
            if not (
                isinstance(name, str)
                and isinstance(args, list)
                and isinstance(kwargs, dict)
                and all(isinstance(k, str) for k in kwargs)
            ):
                raise CodecError("a call is {'method': str, 'args': list, 'kwargs': {str: ...}}")
        except (CodecError, KeyError, TypeError) as e:
            _abort(context, grpc.StatusCode.INVALID_ARGUMENT, f"bad request: {e}")
        method = self._methods.get(name)
        if method is None:
            _abort(
                context,
                grpc.StatusCode.UNIMPLEMENTED,
                f"no method {name!r} is served; available: {', '.join(sorted(self._methods))}",
            )
        try:
            result = method(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 -- reported to the caller, the server keeps serving
            detail = "".join(traceback.format_exception_only(type(e), e)).strip()
            _abort(context, grpc.StatusCode.UNKNOWN, f"{name} raised {detail}")
        try:
            return encode(result)
        except CodecError as e:
            _abort(context, grpc.StatusCode.INTERNAL, f"{name} returned a value that cannot be sent: {e}")


def _abort(context: grpc.ServicerContext, code: grpc.StatusCode, details: str) -> NoReturn:
    """``context.abort``: ends the call with ``code`` (grpc raises; typed here as never returning)."""
    context.abort(code, details)
    raise RuntimeError("grpc's abort returned")  # (it never does)
