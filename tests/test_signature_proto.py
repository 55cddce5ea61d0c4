"""Table signatures written without TensorFlow equal TensorFlow's own encoding, field for field,
and a Reverb table takes them."""

import sys
import types

import numpy as np
import portpicker
import pytest

reverb = pytest.importorskip("reverb")  # (Reverb's own client and protos: Python 3.11)
import tensorflow as tf
import tree
from tensorflow.core.protobuf import struct_pb2
from tensorflow.python.saved_model import nested_structure_coder

from shoal.replay.reverb.signature_proto import encode_structure


def parsed(data: bytes) -> struct_pb2.StructuredValue:
    value = struct_pb2.StructuredValue()
    value.ParseFromString(data)
    return value


@pytest.mark.parametrize(
    "signature",
    [
        {
            "observation": tf.TensorSpec([8, 4], tf.float32, "observation"),
            "action": tf.TensorSpec([8], tf.int64, "action"),
            "extras": {"core_state": tf.TensorSpec([8, 128], tf.float32, "extras/core_state")},
        },
        {"pixels": tf.TensorSpec([4, 84, 84], tf.uint8, "pixels"), "done": tf.TensorSpec([None, 3], tf.bool, "done")},
        (tf.TensorSpec([], tf.float64, "x"), [tf.TensorSpec([2], tf.int32, "y"), tf.TensorSpec([1], tf.float16, "z")]),
    ],
)
def test_the_bytes_parse_to_what_tensorflow_encodes(signature):
    ours = encode_structure(signature, lambda s: (s.name, s.shape.as_list(), s.dtype.as_numpy_dtype))
    assert parsed(ours) == nested_structure_coder.encode_structure(signature)


def test_a_bad_dtype_is_named():
    with pytest.raises(ValueError, match="dtype complex64 has no TensorFlow DataType"):
        encode_structure({"x": types.SimpleNamespace(name="x", shape=[2], dtype=np.complex64)})


def test_a_reverb_table_takes_the_signature():
    signature = {"x": tf.TensorSpec([3], tf.float32, "x")}
    data = encode_structure(signature, lambda s: (s.name, s.shape.as_list(), s.dtype.as_numpy_dtype))
    table = reverb.pybind.Table(
        name="q",
        sampler=reverb.selectors.Fifo(),
        remover=reverb.selectors.Fifo(),
        max_size=10,
        max_times_sampled=1,
        rate_limiter=reverb.rate_limiters.MinSize(1).internal_limiter,
        extensions=[],
        signature=data,
    )
    port = portpicker.pick_unused_port()
    server = reverb.pybind.Server([table], port, None)
    try:
        assert reverb.Client(f"localhost:{port}").server_info(timeout=10)["q"].signature == signature
    finally:
        server.Stop()


def test_a_replay_server_serves_shoals_signatures_back_as_tensorflow_specs():
    from shoal.core.specs import ArraySpec
    from shoal.replay import ReverbServer, make_queue_table

    signature = {
        "observation": {"pixels": ArraySpec((4, 84, 84), np.uint8), "mask": ArraySpec((4, 6), bool)},
        "action": ArraySpec((4,), np.int64),
        "reward": ArraySpec((4,), np.float32),
    }
    server = ReverbServer([make_queue_table("q", signature, 10)])
    try:
        served = server.client.server_info(timeout=10)["q"].signature
    finally:
        server.stop()
    as_tf = lambda s: (tuple(s.shape.as_list()), s.dtype.as_numpy_dtype)  # noqa: E731
    assert tree.map_structure(as_tf, served) == tree.map_structure(lambda s: (s.shape, s.dtype.type), signature)


@pytest.mark.parametrize("make", ["transition", "prioritized", "sequence", "queue", "dropping_fifo"])
def test_a_table_spec_makes_the_table_reverbs_own_classes_make(make):
    """Each factory's ``TableSpec``, built by ``ReverbServer``, has the selectors, sizes and rate
    limiter of the ``reverb.Table`` Reverb's Python classes build for the same arguments."""
    from reverb.cc import schema_pb2

    from shoal.replay import ReverbServer, tables

    sig = {"x": tf.TensorSpec([2], tf.float32)}
    uniform, fifo = reverb.selectors.Uniform(), reverb.selectors.Fifo()
    ratio = reverb.rate_limiters.SampleToInsertRatio
    if make in ("transition", "prioritized"):
        exponent = 0.6 if make == "prioritized" else None
        ours = tables.make_transition_table(
            "t",
            None,
            num_envs=4,
            batch_size=32,
            sgd_steps_per_update=2,
            samples_per_insert=8.0,
            samples_per_insert_tolerance=10.0,
            min_replay_size=100,
            max_replay_size=1000,
            priority_exponent=exponent,
        )
        # 8 items a batch, 8.0 samples/insert, 25 items to start, buffer max(2*16 + 16, 10*8*25)
        theirs = reverb.Table(
            "t",
            reverb.selectors.Prioritized(0.6) if exponent else uniform,
            fifo,
            max_size=250,
            rate_limiter=ratio(8.0, 25, 2000.0),
            signature=sig,
        )
    elif make == "sequence":
        ours = tables.make_sequence_table(
            "t",
            None,
            batch_size=16,
            samples_per_insert=2.0,
            samples_per_insert_tolerance=4.0,
            min_replay_size=50,
            max_replay_size=500,
            priority_exponent=0.9,
        )
        theirs = reverb.Table(
            "t",
            reverb.selectors.Prioritized(0.9),
            fifo,
            max_size=500,
            rate_limiter=ratio(2.0, 50, 400.0),
            signature=sig,
        )
    elif make == "queue":
        ours, theirs = tables.make_queue_table("t", None, 7), reverb.Table.queue("t", 7, signature=sig)
    else:
        ours = tables.make_dropping_fifo_table("t", None, 7)
        theirs = reverb.Table(
            "t",
            fifo,
            fifo,
            max_size=7,
            max_times_sampled=1,
            signature=sig,
            rate_limiter=reverb.rate_limiters.RateLimiter(1.0, 1, 0.0, sys.float_info.max),
        )
    server = ReverbServer([ours])
    try:
        info = schema_pb2.TableInfo.FromString(server._tables["t"].info())
    finally:
        server.stop()
    expected = schema_pb2.TableInfo.FromString(theirs.internal_table.info())
    for proto in (info, expected):
        proto.ClearField("signature")
        proto.ClearField("table_worker_time")
    assert info == expected


def test_a_bad_selector_is_named():
    from shoal.replay.tables import RateLimit, TableSpec

    with pytest.raises(ValueError, match="sampler 'random' is not one of uniform, prioritized, fifo, lifo"):
        TableSpec("t", sampler="random", remover="fifo", max_size=3, rate_limit=RateLimit(1.0, 1, 0.0, 3.0))


def test_table_counts_read_without_tensorflow_equal_reverbs_decoding():
    from reverb.cc import schema_pb2

    from shoal.replay import ReverbServer, make_transition_table
    from shoal.replay.reverb.table_info import table_info

    table = make_transition_table(
        "t",
        None,
        num_envs=1,
        batch_size=2,
        sgd_steps_per_update=1,
        samples_per_insert=1.5,
        samples_per_insert_tolerance=4.0,
        min_replay_size=3,
        max_replay_size=10,
    )
    server = ReverbServer([table])
    client = reverb.Client(server.address)
    try:
        for i in range(5):
            client.insert([np.full(2, i, np.float32)], {"t": 1.0})
        for _ in range(4):
            next(iter(client.sample("t", 1)))
        data = server._tables["t"].info()
    finally:
        server.stop()
    ours, theirs = table_info(data), schema_pb2.TableInfo.FromString(data)
    assert (ours.name, ours.current_size) == (theirs.name, theirs.current_size) == ("t", 5)
    for field in ("samples_per_insert", "min_diff", "max_diff", "min_size_to_sample"):
        assert getattr(ours.rate_limiter_info, field) == getattr(theirs.rate_limiter_info, field)
    assert ours.rate_limiter_info.insert_stats.completed == theirs.rate_limiter_info.insert_stats.completed == 5
    assert ours.rate_limiter_info.sample_stats.completed == theirs.rate_limiter_info.sample_stats.completed == 4
    assert ours.rate_limiter_info.min_diff < 0  # (a negative double, read as one)


def test_a_taken_port_is_named_and_a_port_picked_for_the_server_is_picked_again(monkeypatch):
    import socket

    from shoal.replay import ReverbServer, make_queue_table
    from shoal.replay.reverb import server as server_module

    taken = socket.socket()
    taken.bind(("", 0))
    taken.listen()
    port = taken.getsockname()[1]
    try:
        with pytest.raises(OSError, match=f"could not listen on port {port}"):
            ReverbServer([make_queue_table("q", None, 3)], port=port)
        picks = iter([port, server_module.free_port()])  # (another process took the first pick)
        monkeypatch.setattr(server_module, "free_port", lambda: next(picks))
        server = ReverbServer([make_queue_table("q", None, 3)])
        try:
            assert server.port != port and server.client.server_info(timeout=10)["q"].max_size == 3
        finally:
            server.stop()
    finally:
        taken.close()
