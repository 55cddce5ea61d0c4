"""A host batch packed into one array (``shoal.learners.packing``) comes apart bit for bit
inside a compiled function, with the dtypes JAX gives numpy arguments; a learner that packs
trains exactly as one that does not (on 2 devices: ``tests/test_learner_pmap.py``)."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from shoal.learners.packing import PackedBatch, pack, packs_batches

ROWS = 6


def mixed_batch(rng: np.random.Generator) -> dict:
    """Every kind of field a batch holds: floats with NaN and infinity, 64-bit values, frames,
    bools, int8 masks, scalars per row, a nested dict."""
    reward = rng.normal(size=ROWS).astype(np.float32)
    reward[1], reward[2] = np.nan, -np.inf
    return {
        "observation": {
            "frames": rng.integers(0, 256, (ROWS, 4, 10, 10)).astype(np.uint8),
            "mask": rng.integers(-1, 2, (ROWS, 3)).astype(np.int8),
        },
        "reward": reward,
        "action": rng.integers(-(2**40), 2**40, ROWS),  # int64: int32 as JAX takes it
        "return": rng.normal(size=(ROWS, 2, 3)),  # float64: float32
        "done": rng.random(ROWS) < 0.5,
        "key": rng.integers(0, 2**32, (ROWS, 2), dtype=np.uint64).astype(np.uint32),
    }


def test_a_packed_batch_comes_apart_bit_for_bit_as_jax_takes_its_fields():
    batch = mixed_batch(np.random.default_rng(0))
    packed = pack(batch)
    assert isinstance(packed, PackedBatch) and packed.data.dtype == np.uint8 and packed.data.shape[0] == ROWS
    expected = jax.jit(lambda b: b)(batch)  # numpy arguments as a compiled function takes them
    got = jax.jit(lambda p: p.unpack())(packed)
    assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(expected)
    for g, e in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(expected), strict=True):
        assert g.dtype == e.dtype and g.shape == e.shape
        np.testing.assert_array_equal(np.asarray(g).view(np.uint8), np.asarray(e).view(np.uint8))


def test_rows_stay_rows_so_a_packed_batch_splits_as_its_fields():
    batch = mixed_batch(np.random.default_rng(1))
    packed = pack(batch)
    top = jax.jit(lambda p: p.unpack())(PackedBatch(packed.data[:2], packed.layout))
    for g, e in zip(jax.tree_util.tree_leaves(top), jax.tree_util.tree_leaves(jax.jit(lambda b: b)(batch))):
        np.testing.assert_array_equal(np.asarray(g).view(np.uint8), np.asarray(e)[:2].view(np.uint8))


def test_another_layout_is_another_signature():
    a = pack({"x": np.zeros((4, 2), np.float32)})
    b = pack({"x": np.zeros((4, 2), np.int32)})
    assert a.layout != b.layout  # (a static part of the jitted function's arguments: it compiles anew)
    assert jax.jit(lambda p: p.unpack())(b)["x"].dtype == np.int32


def test_fields_of_different_batch_sizes_are_refused_in_one_line():
    with pytest.raises(ValueError, match=r"share one leading batch axis; got leading sizes 3, 4$"):
        pack({"a": np.zeros((4, 2)), "b": np.zeros(3)})


def test_learners_pack_on_accelerators_unless_told(monkeypatch):
    cpu = jax.devices("cpu")
    monkeypatch.delenv("SHOAL_PACK_BATCHES", raising=False)
    assert not packs_batches(cpu)

    class Accelerator:
        platform = "gpu"

    assert packs_batches([Accelerator()])
    monkeypatch.setenv("SHOAL_PACK_BATCHES", "1")
    assert packs_batches(cpu)
    monkeypatch.setenv("SHOAL_PACK_BATCHES", "0")
    assert not packs_batches([Accelerator()])
    monkeypatch.setenv("SHOAL_PACK_BATCHES", "yes")
    with pytest.raises(ValueError, match="SHOAL_PACK_BATCHES='yes' is not valid: expected auto, 1 or 0"):
        packs_batches(cpu)  # (and before a run starts: tests/test_unit_launch.py's table)


def test_bfloat16_fields_come_apart_and_complex_ones_are_refused_in_one_line():
    import jax.numpy as jnp

    half = np.arange(12, dtype=np.float32).reshape(ROWS, 2).astype(jnp.bfloat16)
    got = jax.jit(lambda p: p.unpack())(pack({"x": half}))["x"]
    assert got.dtype == jnp.bfloat16
    np.testing.assert_array_equal(np.asarray(got).view(np.uint16), half.view(np.uint16))
    with pytest.raises(ValueError, match=r"real numbers only, got complex64 fields \(SHOAL_PACK_BATCHES=0"):
        pack({"x": np.zeros((ROWS, 2), np.complex64)})
