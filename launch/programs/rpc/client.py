"""The RPC client: ``client.method(*args)`` calls ``method`` on the served object.

``client.futures.method(*args)`` returns a future instead (``.result(timeout)``);
``client.call_blocking(method, *args)`` makes gRPC's blocking call (no thread per call).
``wait_for_ready(timeout_s)`` blocks until the server answers or raises ``TimeoutError``.
Every call has a deadline (``timeout_s``, default 60 s); failures raise ``RemoteError``
carrying the gRPC status code, or ``TimeoutError`` when the deadline passed.
"""

from __future__ import annotations

from typing import Any

import grpc

from shoal.core.codec import decode, encode
from shoal.launch.programs.rpc.server import MAX_MESSAGE_ENV, METHOD, TOKEN_KEY, channel_options


class RemoteError(RuntimeError):
    def __init__(self, address: str, method: str, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"RPC {method} at {address} failed with {code.name}: {details}")
        self.code, self.details = code, details


class _Future:
    def __init__(self, client: RpcClient, method: str, inner: grpc.Future) -> None:
        self._client, self._method, self._inner = client, method, inner

    def done(self) -> bool:
        return self._inner.done()

    def result(self, timeout: float | None = None) -> Any:
        try:
            return decode(self._inner.result(timeout=timeout))
        except grpc.FutureTimeoutError:
            raise TimeoutError(f"RPC {self._method} at {self._client.address}: no reply within {timeout}s") from None
        except grpc.RpcError as e:
            raise self._client._error(self._method, e) from None


class _Futures:
    def __init__(self, client: RpcClient) -> None:
        self._client = client

    def __getattr__(self, method: str):
        return lambda *args, **kwargs: self._client._future(method, args, kwargs)


class RpcClient:
    def __init__(self, address: str, token: str | None = None, timeout_s: float = 60.0) -> None:
        self.address = address
        self._timeout_s = timeout_s
        self._metadata = ((TOKEN_KEY, token),) if token else None
        self._channel = grpc.insecure_channel(address, options=channel_options())
        self._stub = self._channel.unary_unary(METHOD)
        self.futures = _Futures(self)

    def wait_for_ready(self, timeout_s: float = 30.0) -> RpcClient:
        try:
            grpc.channel_ready_future(self._channel).result(timeout=timeout_s)
        except grpc.FutureTimeoutError:
            raise TimeoutError(f"no RPC server answered at {self.address} within {timeout_s}s") from None
        return self

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return self._future(method, args, kwargs).result()

    def call_blocking(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """``call`` through gRPC's blocking call, for a thread that makes many calls one after
        another (a replay writer's sender): a future starts a thread to poll the channel for
        each call made while none is in flight (~0.2 ms of CPU a call)."""
        request = encode({"method": method, "args": list(args), "kwargs": kwargs})
        try:
            reply = self._stub(request, timeout=self._timeout_s, metadata=self._metadata)
        except grpc.RpcError as e:
            raise self._error(method, e) from None
        return decode(reply)

    def _future(self, method: str, args, kwargs) -> _Future:
        request = encode({"method": method, "args": list(args), "kwargs": kwargs})
        # No wait_for_ready: a server publishes its address once it serves, so an unreachable
        # one is gone and the call fails at once (UNAVAILABLE), instead of holding the caller
        # (and a stopping program) until its deadline.
        inner = self._stub.future(request, timeout=self._timeout_s, metadata=self._metadata)
        return _Future(self, method, inner)

    def _error(self, method: str, e: grpc.RpcError) -> Exception:
        if e.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
            return TimeoutError(f"RPC {method} at {self.address}: no reply within {self._timeout_s}s")
        details = e.details()
        if e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "larger than max" in (details or ""):
            details += f" (messages are limited to {MAX_MESSAGE_ENV} MiB; raise it for larger params)"
        return RemoteError(self.address, method, e.code(), details)

    def __getattr__(self, method: str):
        if method.startswith("_"):
            raise AttributeError(method)
        return lambda *args, **kwargs: self.call(method, *args, **kwargs)

    def close(self) -> None:
        self._channel.close()

    def __repr__(self) -> str:
        return f"RpcClient({self.address!r})"
