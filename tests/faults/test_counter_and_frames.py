"""What an authenticated caller may send: counts that poison a run and frames that exhaust a
node are refused to the caller, and a value a log cannot hold costs a warning, not a node."""

import struct
import subprocess
import sys

import grpc
import numpy as np
import pytest

from shoal.core.counting import Counter
from shoal.core.loggers import Dispatcher, Logger, TensorBoardLogger
from shoal.launch import Program, ServiceNode, launch
from shoal.launch.programs.rpc import CodecError, RemoteError, RpcClient, decode, encode
from shoal.launch.programs.rpc.server import METHOD, TOKEN_KEY

MB = 2**20
MAX_ITEMS = 1 << 20  # (the codec's MAX_ITEMS: what one message may hold in all)


def test_the_counter_takes_only_non_negative_integers_below_2_to_the_53(tmp_path):
    program = Program("counting")
    program.add_node(ServiceNode(Counter, {"env_steps": 5}, methods=("increment", "get_counts")), label="counter")
    run = launch(program, "inprocess", run_dir=str(tmp_path))
    try:
        client = run.client("counter")
        for bad in (1e30, 1.7e308, -1, -0.5, 1.5, 2**53, float("nan"), True, np.ones(3), "7"):
            with pytest.raises(RemoteError) as refused:  # the whole call: episodes=1 is not added either
                client.increment(episodes=1, env_steps=bad)
            assert refused.value.code == grpc.StatusCode.UNKNOWN
            assert f"non-negative integers below 2**53; got env_steps={bad!r:.20}" in refused.value.details
        client.increment(big=2**53 - 2)
        with pytest.raises(RemoteError, match="counter big would reach 9,007,199,254,740,992"):
            client.increment(env_steps=1, big=2)  # each value fits, the sum would not
        assert client.get_counts() == {"env_steps": 5, "big": 2**53 - 2}
        counts = client.increment(env_steps=10.0, episodes=np.int64(2), big=1)  # integral floats: integers
        assert counts == {"env_steps": 15, "episodes": 2, "big": 2**53 - 1}
        assert all(type(v) is int for v in counts.values())
    finally:
        run.stop()
    with pytest.raises(ValueError, match="got env_steps=-3"):  # a checkpoint's counts are checked too
        Counter({"env_steps": -3})


class Recorder(Logger):
    def __init__(self):
        self.rows = []

    def write(self, values):
        self.rows.append(dict(values))


class Broken(Logger):
    def write(self, values):
        raise TypeError(f"cannot log {values}")


def test_a_logger_that_fails_costs_one_warning_and_the_other_logs_go_on(tmp_path, capsys):
    recorder = Recorder()
    logger = Dispatcher([Broken(), TensorBoardLogger(str(tmp_path), "evaluator"), recorder])
    rows = [
        {"env_steps": 10**30, "episode_return": 9.0},
        {"env_steps": float("nan"), "episode_return": 1e300},
        {"env_steps": 2**63, "x": 10**400},
        {"env_steps": 16, "episode_return": 10**400},
    ]
    for row in rows:  # steps TensorBoard cannot hold (int64), values a float cannot hold
        logger.write(row)
    logger.close()
    assert recorder.rows == rows
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("shoal: warning:")]
    assert warnings == [
        "shoal: warning: Broken could not write a row: TypeError: cannot log "
        "{'env_steps': 1000000000000000000000000000000, 'episode_return': 9.0}; the other logs go on "
        "(further failures of this logger are not reported)"
    ]


def frame(header):
    return struct.pack("<4sI", b"SHL1", len(header)) + header


def array_header(n):
    return b"\xdd" + struct.pack(">I", n)


N = 20_000_000
HOSTILE = {  # name: (msgpack header, the most memory decoding may take, in bytes per frame byte)
    "20 M nils in one array": (array_header(N) + b"\xc0" * N, 1),
    "a million empty lists": (array_header(MAX_ITEMS - 9) + b"\x90" * (MAX_ITEMS - 9), 2),  # ~64 bytes each
    "a million {nil: nil} maps": (array_header(MAX_ITEMS - 9) + b"\x81\xc0\xc0" * (MAX_ITEMS - 9), 2),
    "8 nested arrays of a million nils": (
        b"".join(array_header(MAX_ITEMS - 9) + b"\xc0" * (MAX_ITEMS - 10) for _ in range(8)) + b"\xc0",
        8,
    ),  # (slots: 8 bytes)
}

PEAK = """
import re
def reset_peak():  # the peak RSS (VmHWM) becomes the current RSS (Linux >= 4.0)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
def peak():
    with open("/proc/self/status") as f:
        return int(re.search(r"VmHWM:\\s+(\\d+) kB", f.read()).group(1)) * 1024
"""

DECODE = (
    PEAK
    + """
import sys, time
from shoal.core.codec import CodecError, decode
frame = sys.stdin.buffer.read()
reset_peak()
before = peak()
started = time.perf_counter()
try:
    decode(frame)
    outcome = "accepted"
except CodecError as e:
    outcome = f"refused: {e}"
seconds = time.perf_counter() - started
print(peak() - before, seconds, outcome)
"""
)


@pytest.mark.parametrize("name", list(HOSTILE))
def test_a_hostile_frame_is_refused_before_it_expands(name):
    header, per_byte = HOSTILE[name]
    data = frame(header)
    out = subprocess.run([sys.executable, "-c", DECODE], input=data, capture_output=True, check=True).stdout
    grown, seconds, outcome = out.decode().strip().split(" ", 2)
    grown = int(grown)  # (the peak, however briefly)
    assert outcome.startswith("refused:") and "items" in outcome, outcome
    assert grown <= per_byte * len(data) + 16 * MB, (
        f"decoding {len(data) / MB:.0f} MB grew the peak by {grown / MB:.0f} MB"
    )
    assert float(seconds) < 10, f"{seconds}s to refuse"  # (generous: under 1 s; 20 M nils took 5-12 s before)


def test_legit_messages_still_decode():
    params = {"layer": {"w": np.ones((512, 512), np.float32), "b": np.zeros(512, np.float32)}}
    words = ["actor learner replay"] * 5000 + [(1, 2.5, None)] * 1000
    counts = {f"env_steps_actor_{i}": i for i in range(64)}
    value = decode(encode([params, words, counts, list(range(MAX_ITEMS // 2))]))
    assert np.array_equal(value[0]["layer"]["w"], params["layer"]["w"]) and value[1:3] == [words, counts]
    with pytest.raises(CodecError, match="more than 1,048,576 items in one message"):
        decode(encode([[0] * 1000] * 1100))  # the total counts, not each list


SERVE = (
    PEAK
    + """
import time
from shoal.launch.programs.rpc import RpcServer
class Probe:
    def reset_peak(self):
        reset_peak()
        return peak()
    def peak(self):
        return peak()
server = RpcServer(Probe(), token="s3cret").start()
print(server.port, flush=True)
time.sleep(600)
"""
)


def test_a_hostile_call_through_a_real_server_is_refused_without_its_memory():
    proc = subprocess.Popen([sys.executable, "-c", SERVE], stdout=subprocess.PIPE, text=True)
    try:
        address = f"127.0.0.1:{proc.stdout.readline().strip()}"
        client = RpcClient(address, token="s3cret", timeout_s=60).wait_for_ready(30)
        before = client.reset_peak()
        header = encode({"method": "peak", "args": [], "kwargs": {}})[8:].rstrip(b"\0")
        call = frame(header.replace(b"\x90", array_header(N) + b"\xc0" * N, 1))  # a call with 20 M nil args
        with (
            grpc.insecure_channel(address, options=[("grpc.max_send_message_length", -1)]) as channel,
            pytest.raises(grpc.RpcError) as refused,
        ):
            channel.unary_unary(METHOD)(call, timeout=60, metadata=((TOKEN_KEY, "s3cret"),))
        grown = client.peak() - before  # the frame itself is held by gRPC and Python: ~3x its size
        assert grown <= 4 * len(call) + 16 * MB, f"a {len(call) / MB:.0f} MB call grew the peak by {grown / MB:.0f} MB"
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, refused.value
        assert "a container of more than 1,048,576 items" in refused.value.details()
    finally:
        proc.kill()
        proc.wait()
