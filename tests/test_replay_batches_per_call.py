"""Several batches in one sample call (``shoal.replay.native.sampler``, ``BATCHES_PER_CALL``): the
server's ``min_items`` takes what the rate limiter lets through at once and waits only for the
first ``min_items``; over RPC a dataset's sampler brings up to four batches a call and hands them
out one at a time, each item's columns still its own."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from shoal.core.specs import ArraySpec
from shoal.launch.programs.rpc import RpcClient, RpcServer
from shoal.replay.native import SERVICE_METHODS, NativeReplayClient, NativeReplayServer
from shoal.replay.native.sampler import BATCHES_PER_CALL
from shoal.replay.tables import RateLimit, TableSpec

SIGNATURE = {"a": ArraySpec((3,), np.float32), "b": ArraySpec((), np.int32)}
FAR_S = 600.0  # (a deadline no passing check waits for: the call returns on the limiter's state)


def _server(sampler: str, rate_limit: RateLimit, max_times_sampled: int = 0) -> NativeReplayServer:
    exponent = 0.6 if sampler == "prioritized" else None
    spec = TableSpec(
        "t", sampler, "fifo", 1000, rate_limit, max_times_sampled, priority_exponent=exponent, signature=SIGNATURE
    )
    return NativeReplayServer([spec], seed=5)


def _write(client, values) -> None:
    writer = client.writer(1, 30.0)
    for v in values:
        writer.append([np.full(3, v, np.float32), np.int32(v)])
        writer.create_item("t", 1.0, 1)
        writer.commit()
    writer.close()


def _sample_in_thread(server, num_items, min_items):
    got: dict = {}
    thread = threading.Thread(target=lambda: got.update(served=server.sample("t", num_items, FAR_S, min_items)))
    thread.start()
    return thread, got


@pytest.mark.parametrize("sampler", ["uniform", "prioritized", "fifo"])
def test_min_items_takes_what_the_limiter_lets_through_now_and_waits_only_for_the_first(sampler):
    # one sample per insert (min_diff 0): 10 inserts let exactly 10 items through
    server = _server(sampler, RateLimit(1.0, 1, 0.0, 1e300))
    try:
        _write(server.client, range(10))
        thread, got = _sample_in_thread(server, 40, 4)
        thread.join(timeout=120)  # (without min_items it would wait out FAR_S for the other 30)
        assert not thread.is_alive(), "the call waited for items the limiter held back"
        assert len(got["served"]["key"]) == 10
        thread, got = _sample_in_thread(server, 40, 4)  # (none ready: it waits for the first 4)
        _write(server.client, range(10, 14))
        thread.join(timeout=120)
        assert not thread.is_alive() and len(got["served"]["key"]) == 4
        served = got["served"]
        np.testing.assert_array_equal(served["columns"][0][:, 0], served["columns"][1])  # (each item's own columns)
    finally:
        server.stop()


def test_a_dataset_over_rpc_takes_several_batches_a_call_and_hands_them_out_in_turn():
    # (columns this small travel in the reply; tests/test_native_replay.py's large batches, through
    # shared memory, come several a call as well)
    server = _server("fifo", RateLimit(1.0, 1, -1e300, 1e300), 1)  # (a queue: the batches' order is the items')
    calls = []
    sample = server.sample
    server.sample = lambda *args: calls.append(args[1]) or sample(*args)  # (counts the server's sample calls)
    rpc = RpcServer(server, token="t0ken", methods=SERVICE_METHODS).start()
    client = NativeReplayClient(RpcClient(rpc.address, token="t0ken", timeout_s=30), rpc.address)
    try:
        _write(client, range(64))
        sampler = client.sampler("t", 8, timeout_s=30.0, poll_s=5.0, each_item_once=False)
        batches = [sampler.sample(8) for _ in range(8)]
        sampler.close()
        values = np.concatenate([b.data["b"] for b in batches])
        np.testing.assert_array_equal(values, np.arange(64))  # (every item once, in order, none lost)
        for b in batches:
            assert len(b.info.key) == 8 == len(b.info.probability) == len(b.data["a"])
            np.testing.assert_array_equal(b.data["a"][:, 0], b.data["b"])
        # the first batch alone, then up to four a call: 8 batches in 3 calls (where one a call made 8),
        # and a 4th under way once the third call's batches were all handed out (the next prefetch)
        assert calls[:3] == [8, 8 * BATCHES_PER_CALL, 8 * BATCHES_PER_CALL] and len(calls) <= 4, calls
    finally:
        rpc.stop()
        server.stop()


def test_large_batches_come_fewer_a_call(monkeypatch):
    from shoal.replay.native import sampler as samplers

    batch_bytes = 8 * (3 * 4 + 4)  # (8 items of a float32[3] and an int32)
    monkeypatch.setattr(samplers, "CALL_MAX_BYTES", 2 * batch_bytes + 1)  # (room for two batches a call)
    server = _server("fifo", RateLimit(1.0, 1, -1e300, 1e300), 1)
    calls = []
    sample = server.sample
    server.sample = lambda *args: calls.append(args[1]) or sample(*args)
    rpc = RpcServer(server, token="t0ken", methods=SERVICE_METHODS).start()
    client = NativeReplayClient(RpcClient(rpc.address, token="t0ken", timeout_s=30), rpc.address)
    try:
        _write(client, range(40))
        sampler = client.sampler("t", 8, timeout_s=30.0, poll_s=5.0, each_item_once=False)
        values = np.concatenate([sampler.sample(8).data["b"] for _ in range(5)])
        sampler.close()
        np.testing.assert_array_equal(values, np.arange(40))
        assert calls[:3] == [8, 16, 16], calls
    finally:
        rpc.stop()
        server.stop()
