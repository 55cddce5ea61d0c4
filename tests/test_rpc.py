"""The RPC layer over real gRPC on loopback."""

import socket
import time

import grpc
import ml_dtypes
import numpy as np
import pytest

from shoal.launch.programs.rpc import CodecError, RemoteError, RpcClient, RpcServer, decode, encode
from shoal.launch.programs.rpc.server import METHOD, TOKEN_KEY

DTYPES = [
    np.bool_,
    np.int8,
    np.int16,
    np.int32,
    np.int64,
    np.uint8,
    np.uint16,
    np.uint32,
    np.uint64,
    np.float16,
    np.float32,
    np.float64,
    np.complex64,
    np.complex128,
    ml_dtypes.bfloat16,
]


class Service:
    def __init__(self):
        self.calls = 0

    def echo(self, value, scale=None):
        self.calls += 1
        return value

    def add(self, a, b):
        return a + b

    def fail(self):
        raise KeyError("boom")

    def run(self):  # never exposed over RPC
        raise AssertionError("run must not be callable remotely")

    def _private(self):
        return "secret"


def nested_payload():
    rng = np.random.default_rng(0)
    arrays = {np.dtype(t).name: (rng.normal(size=(3, 2)) * 10).astype(t) for t in DTYPES}
    return {
        "arrays": arrays,
        "list": [1, -2.5, "s", b"\x00bytes", None, True, [np.arange(4)]],
        "tuple": (1, ("nested", np.float32(3.5))),
        7: {"int key": np.zeros((0, 5), np.float32)},
        "scalar": np.int64(-3),
        "big": np.arange(10**6, dtype=np.float32).reshape(1000, 1000),
    }


def assert_same(a, b):
    assert type(a) is type(b) or (isinstance(a, np.generic) and isinstance(b, np.ndarray)), (a, b)
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            assert_same(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert_same(x, y)
    elif isinstance(a, (np.ndarray, np.generic)):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)
    else:
        assert a == b


@pytest.fixture
def served():
    service = Service()
    server = RpcServer(service, token="s3cret").start()
    client = RpcClient(server.address, token="s3cret", timeout_s=30).wait_for_ready(10)
    yield service, server, client
    client.close()
    server.stop()


def test_codec_round_trip_without_network():
    payload = nested_payload()
    assert_same(payload, decode(encode(payload)))


def test_rpc_round_trip_of_every_dtype(served):
    _, server, client = served
    assert server.address.startswith("127.0.0.1:")
    payload = nested_payload()
    assert_same(payload, client.echo(payload))
    assert client.add(2, b=3) == 5
    future = client.futures.add(np.ones(3), np.ones(3))
    np.testing.assert_array_equal(future.result(timeout=10), 2 * np.ones(3))


def test_codec_refuses_what_it_cannot_send():
    with pytest.raises(CodecError, match="cannot send a value of type object"):
        encode({"x": object()})
    with pytest.raises(CodecError, match="dtype object"):
        encode(np.array([{}], dtype=object))


def raw_call(address, frame, token="s3cret"):
    with grpc.insecure_channel(address) as channel:
        stub = channel.unary_unary(METHOD)
        with pytest.raises(grpc.RpcError) as info:
            stub(frame, timeout=10, metadata=((TOKEN_KEY, token),))
    return info.value.code()


def test_bad_frames_and_tokens_get_errors_and_server_keeps_serving(served):
    service, server, client = served
    rng = np.random.default_rng(1)
    for size in (0, 3, 64, 4096):
        assert raw_call(server.address, rng.bytes(size)) == grpc.StatusCode.INVALID_ARGUMENT
    forged = encode({"method": "echo"})[:8] + rng.bytes(100)  # right magic, garbage header
    assert raw_call(server.address, forged) == grpc.StatusCode.INVALID_ARGUMENT
    assert raw_call(server.address, encode([1, 2])) == grpc.StatusCode.INVALID_ARGUMENT
    assert (
        raw_call(server.address, encode({"method": "echo", "args": [1]}), token="wrong")
        == grpc.StatusCode.UNAUTHENTICATED
    )
    with pytest.raises(RemoteError) as info:
        RpcClient(server.address, token=None).echo(1)
    assert info.value.code == grpc.StatusCode.UNAUTHENTICATED
    for name, code in (
        ("_private", grpc.StatusCode.UNIMPLEMENTED),
        ("run", grpc.StatusCode.UNIMPLEMENTED),
        ("nope", grpc.StatusCode.UNIMPLEMENTED),
        ("fail", grpc.StatusCode.UNKNOWN),
    ):
        with pytest.raises(RemoteError) as info:
            client.call(name)
        assert info.value.code == code, name
    assert "KeyError" in str(RemoteError("a", "fail", grpc.StatusCode.UNKNOWN, "fail raised KeyError: 'boom'"))
    calls_before = service.calls
    assert client.echo("still serving") == "still serving"
    assert service.calls == calls_before + 1  # no bad call reached the method


def test_wait_for_ready_times_out_clearly():
    with socket.socket() as s:  # bound but not listening: refused, and no other server can take it
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        with pytest.raises(TimeoutError, match=f"no RPC server answered at 127.0.0.1:{port} within 0.5s"):
            RpcClient(f"127.0.0.1:{port}").wait_for_ready(0.5)
        client = RpcClient(f"127.0.0.1:{port}", timeout_s=30)
        started = time.monotonic()
        with pytest.raises(RemoteError) as info:  # a server that is gone fails the call at once
            client.echo(1)
        assert info.value.code == grpc.StatusCode.UNAVAILABLE and time.monotonic() - started < 5


def test_a_server_off_loopback_needs_a_token():
    with pytest.raises(ValueError, match="refusing to serve RPC on '0.0.0.0' without a token"):
        RpcServer(Service(), host="0.0.0.0")
    server = RpcServer(Service(), host="0.0.0.0", token="s3cret").start()
    try:
        client = RpcClient(f"127.0.0.1:{server.port}", token="s3cret").wait_for_ready(10)
        assert client.add(1, 2) == 3
    finally:
        server.stop()
