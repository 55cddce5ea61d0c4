"""The RPC layer against hostile input: codec fuzzing, the depth bomb, oversized and
unauthenticated requests, and services that expose only what their clients need."""

import os
import struct
import subprocess
import sys
import time

import grpc
import msgpack
import numpy as np
import psutil
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shoal.launch.programs.rpc import CodecError, RemoteError, RpcClient, RpcServer, decode, encode
from shoal.launch.programs.rpc.server import METHOD, TOKEN_KEY

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False),
    st.text(max_size=20),
    st.binary(max_size=20),
)
ARRAYS = st.builds(
    lambda dtype, shape, seed: (np.random.default_rng(seed).normal(size=shape) * 100).astype(dtype),
    st.sampled_from([np.float32, np.float64, np.int32, np.int64, np.uint8, np.bool_]),
    st.lists(st.integers(0, 4), max_size=3).map(tuple),
    st.integers(0, 2**32 - 1),
)
VALUES = st.recursive(
    st.one_of(SCALARS, ARRAYS),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=4).map(tuple),
        st.dictionaries(st.text(max_size=8), inner, max_size=4),
    ),
    max_leaves=20,
)


def same(a, b):
    if isinstance(a, np.generic):  # numpy scalars arrive as 0-d arrays
        a = np.asarray(a)
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return a == b and type(a) is type(b)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(VALUES)
def test_codec_round_trips(value):
    assert same(value, decode(encode(value)))


@settings(max_examples=500, deadline=None)
@given(VALUES, st.data())
def test_mutated_frames_never_crash_the_decoder(value, data):
    frame = bytearray(encode(value))
    for _ in range(data.draw(st.integers(1, 8))):
        position = data.draw(st.integers(0, len(frame) - 1))
        frame[position] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(frame)))
    try:
        decode(bytes(frame[:cut]))
    except CodecError:
        pass  # the only acceptable failure


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=2000))
def test_random_bytes_never_crash_the_decoder(frame):
    for candidate in (frame, b"SHL1" + struct.pack("<I", len(frame)) + frame):
        try:
            decode(candidate)
        except CodecError:
            pass


def depth_bomb(levels=200):
    payload = msgpack.packb(1)
    for _ in range(levels):
        payload = msgpack.packb(msgpack.ExtType(2, payload))  # nested tuple extensions: ~4 bytes a level
    return struct.pack("<4sI", b"SHL1", len(payload)) + payload


class Counter:
    def __init__(self):
        self.total = 0

    def increment(self, n):
        self.total += n
        return self.total

    def restore(self, total):
        self.total = total


def call(address, frame, token="s3cret"):
    with grpc.insecure_channel(address) as channel:
        try:
            channel.unary_unary(METHOD)(frame, timeout=30, metadata=((TOKEN_KEY, token),) if token else None)
        except grpc.RpcError as e:
            return e.code()
    return grpc.StatusCode.OK


def test_depth_bomb_and_fuzz_frames_get_invalid_argument_and_the_server_serves_on():
    server = RpcServer(Counter(), token="s3cret").start()
    try:
        bomb = depth_bomb()
        assert len(bomb) < 1300  # the 1.2 KB request that used to kill a node with SIGSEGV
        with pytest.raises(CodecError, match="nesting deeper"):
            decode(bomb)
        assert call(server.address, bomb) == grpc.StatusCode.INVALID_ARGUMENT
        rng = np.random.default_rng(0)
        good = encode({"method": "increment", "args": [1], "kwargs": {}})
        for _i in range(200):  # mutated calls: rejected or served, never a crash
            frame = bytearray(good)
            frame[rng.integers(len(frame))] = rng.integers(256)
            assert call(server.address, bytes(frame)) in (
                grpc.StatusCode.OK,
                grpc.StatusCode.INVALID_ARGUMENT,
                grpc.StatusCode.UNIMPLEMENTED,
                grpc.StatusCode.UNKNOWN,
            )
        assert RpcClient(server.address, token="s3cret").increment(0) >= 0
    finally:
        server.stop()


def test_a_request_that_is_not_a_call_record_gets_invalid_argument():
    server = RpcServer(Counter(), token="s3cret").start()
    try:
        for message in (np.arange(3), [1, 2], "increment", 7, None):  # a valid frame, but no call
            assert call(server.address, encode(message)) == grpc.StatusCode.INVALID_ARGUMENT, message
        assert RpcClient(server.address, token="s3cret").increment(1) == 1
    finally:
        server.stop()


def test_only_the_methods_a_service_exposes_are_callable():
    server = RpcServer(Counter(), token="s3cret", methods=["increment"]).start()
    try:
        client = RpcClient(server.address, token="s3cret")
        assert client.increment(3) == 3
        with pytest.raises(RemoteError) as info:
            client.restore(10**9)
        assert info.value.code == grpc.StatusCode.UNIMPLEMENTED
        assert client.increment(0) == 3
    finally:
        server.stop()


SERVE = """
import sys, time
from shoal.launch.programs.rpc import RpcServer
class Echo:
    def echo(self, x):
        return len(x)
server = RpcServer(Echo(), token="s3cret").start()
print(server.port, flush=True)
time.sleep(600)
"""


@pytest.mark.e2e  # (a server in a second process)
def test_unauthenticated_large_requests_are_refused_without_holding_memory():
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVE],
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ, SHOAL_RPC_MAX_MESSAGE_MB="256"),
    )
    try:
        address = f"127.0.0.1:{proc.stdout.readline().strip()}"
        RpcClient(address, token="s3cret").wait_for_ready(30)
        server = psutil.Process(proc.pid)
        before = server.memory_info().rss
        with grpc.insecure_channel(address, options=[("grpc.max_send_message_length", -1)]) as channel:
            stub = channel.unary_unary(METHOD)
            for size, expected in (
                (128 * 2**20, grpc.StatusCode.UNAUTHENTICATED),  # under the size limit
                (512 * 2**20, grpc.StatusCode.RESOURCE_EXHAUSTED),
            ):  # over it
                body = b"\0" * size
                for _ in range(2):
                    with pytest.raises(grpc.RpcError) as info:
                        stub(body, timeout=60)  # no token
                    assert info.value.code() in (expected, grpc.StatusCode.UNAUTHENTICATED), info.value
        time.sleep(0.5)
        grown = (server.memory_info().rss - before) / 2**20
        assert grown < 32, f"the server's memory grew by {grown:.0f} MB"
        assert RpcClient(address, token="s3cret").echo(b"still serving") == 13
    finally:
        proc.kill()


def test_oversized_messages_fail_with_a_clear_error(monkeypatch):
    monkeypatch.setenv("SHOAL_RPC_MAX_MESSAGE_MB", "1")
    server = RpcServer(Counter(), methods=["increment"]).start()
    try:
        with pytest.raises(RemoteError, match="larger than max.*SHOAL_RPC_MAX_MESSAGE_MB"):
            RpcClient(server.address).increment(np.zeros(2**20, np.float32))  # 4 MB
    finally:
        server.stop()


BAD_ITEM_RUNS = {  # a columnar insert_items message (one array per field) -> what its one-line error says
    "wrong shape": (
        [["t", np.ones(2), [np.zeros((2, 4), np.float32)]]],
        "is float32[4]; its signature says float32[3]",
    ),
    "rows and priorities differ": ([["t", np.ones(3), [np.zeros((2, 3), np.float32)]]], "holds 2 steps, its indices 3"),
    "NaN field": ([["t", np.ones(2), [np.full((2, 3), np.nan, np.float32)]]], "holds NaN or inf"),
    "negative priority": ([["t", -np.ones(2), [np.zeros((2, 3), np.float32)]]], "finite numbers >= 0"),
    "unknown table": ([["nope", np.ones(2), [np.zeros((2, 3), np.float32)]]], "'nope' is not served here"),
    "not a run": ([["t", np.ones(2)]], "a run of items is [table, priorities, columns]"),
    "no columns": ([["t", np.ones(2), []]], "has no columns"),
}


@pytest.mark.parametrize("case", list(BAD_ITEM_RUNS))
def test_a_malformed_columnar_insert_is_refused_in_one_line_and_the_table_is_untouched(case):
    """``insert_items`` (a writer's one-step items, a column per field) checks the whole message
    before it stores any of it; a good run sent with a bad one is refused with it."""
    from shoal.core.specs import ArraySpec
    from shoal.replay import RateLimit, TableSpec
    from shoal.replay.native import SERVICE_METHODS, NativeReplayServer

    spec = TableSpec("t", "fifo", "fifo", 10, RateLimit(1.0, 1, -1e9, 1e9), signature=ArraySpec((3,), np.float32))
    replay = NativeReplayServer([spec])
    server = RpcServer(replay, token="s3cret", methods=SERVICE_METHODS).start()
    try:
        client = RpcClient(server.address, token="s3cret")
        runs, says = BAD_ITEM_RUNS[case]
        good = ["t", np.ones(1), [np.zeros((1, 3), np.float32)]]
        with pytest.raises(RemoteError) as refused:
            client.insert_items([good, *runs], 5.0)
        assert refused.value.code == grpc.StatusCode.UNKNOWN and says in str(refused.value), str(refused.value)
        assert "\n" not in str(refused.value)
        assert replay.server_info()["t"]["current_size"] == 0 and len(replay._store) == 0
        assert client.insert_items([good], 5.0) == 1  # (and the server serves on)
    finally:
        server.stop()
        replay.stop()
