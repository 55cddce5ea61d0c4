"""A host batch as one array: every leaf's bytes side by side in one ``uint8`` row per batch
row (``pack``), so that placing a batch on the learner's devices is one transfer, not one per
field, and the fields taken apart again inside the compiled update (``PackedBatch.unpack``:
slices and bitcasts, fused by XLA).

Why: on a GPU a small batch (DQN's default: seven arrays of 512 rows) costs the host a fixed
price per array it places, and that price, not the bytes, bounds how many updates a second the
learner is fed. Rows stay rows, so a packed batch splits over the devices along its leading
axis exactly as its fields would (device ``d`` gets the rows ``d*b .. (d+1)*b - 1`` of every
field).

Exact: unpacking gives back every field bit for bit, with the dtype JAX would have given it
(``int64`` as ``int32`` and ``float64`` as ``float32`` unless 64-bit mode is on, as a jitted
function's numpy arguments are converted).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import numpy as np
from jax import lax

from shoal.core import environment_variables


class Field(NamedTuple):
    """One leaf's place in a packed row: its dtype, its shape after the batch axis, and its bytes."""

    dtype: np.dtype
    shape: tuple[int, ...]
    offset: int
    nbytes: int


@jax.tree_util.register_pytree_node_class
class PackedBatch:
    """``data`` (``uint8 [batch, row_bytes]``) and the layout to take it apart (static: part of
    the compiled update's signature, so a batch of another layout compiles its own update)."""

    def __init__(self, data: Any, layout: tuple[Any, tuple[Field, ...]]) -> None:
        self.data, self.layout = data, layout

    def tree_flatten(self) -> tuple[tuple[Any], tuple[Any, tuple[Field, ...]]]:
        return (self.data,), self.layout

    @classmethod
    def tree_unflatten(cls, layout: tuple[Any, tuple[Field, ...]], children: Sequence[Any]) -> PackedBatch:
        return cls(children[0], layout)

    def unpack(self) -> Any:
        """The batch's fields (traced arrays ``[rows, ...]``), inside a compiled function."""
        treedef, fields = self.layout
        rows = self.data.shape[0]
        leaves = []
        for field in fields:
            columns = lax.slice_in_dim(self.data, field.offset, field.offset + field.nbytes, axis=1)
            dtype = field.dtype
            if dtype == np.bool_:
                leaf = columns != 0
            elif dtype.itemsize == 1:
                leaf = lax.bitcast_convert_type(columns, dtype)
            else:  # [rows, n * itemsize] bytes -> [rows, n, itemsize] -> [rows, n] values
                leaf = lax.bitcast_convert_type(columns.reshape(rows, -1, dtype.itemsize), dtype)
            leaves.append(leaf.reshape((rows, *field.shape)))
        return jax.tree_util.tree_unflatten(treedef, leaves)


def pack(tree: Any) -> PackedBatch:
    """Host arrays ``[batch, ...]`` (one batch size for all) as one ``PackedBatch`` (a copy)."""
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    arrays = [np.asarray(leaf) for leaf in leaves]
    arrays = [a.astype(jax.dtypes.canonicalize_dtype(a.dtype), copy=False) for a in arrays]
    rows = {a.shape[0] if a.ndim else -1 for a in arrays}
    if len(rows) != 1 or not arrays[0].ndim:
        sizes = ", ".join("none (a scalar)" if n < 0 else str(n) for n in sorted(rows))
        raise ValueError(f"a packed batch's fields share one leading batch axis; got leading sizes {sizes}")
    complex_fields = sorted({str(a.dtype) for a in arrays if a.dtype.kind == "c"})
    if complex_fields:
        raise ValueError(
            f"a packed batch holds real numbers only, got {', '.join(complex_fields)} fields "
            "(SHOAL_PACK_BATCHES=0 places a batch's fields one by one)"
        )
    batch = arrays[0].shape[0]
    fields, offset = [], 0
    for a in arrays:
        nbytes = a[:1].nbytes
        fields.append(Field(a.dtype, a.shape[1:], offset, nbytes))
        offset += nbytes
    data = np.empty((batch, offset), np.uint8)
    for a, field in zip(arrays, fields, strict=True):
        data[:, field.offset : field.offset + field.nbytes] = np.ascontiguousarray(a).reshape(batch, -1).view(np.uint8)
    return PackedBatch(data, (treedef, tuple(fields)))


def unpacked(batch: Any) -> Any:
    """``batch`` with a ``PackedBatch`` taken apart (inside a compiled function); anything else as it is."""
    return batch.unpack() if isinstance(batch, PackedBatch) else batch


def packs_batches(devices: Sequence[jax.Device]) -> bool:
    """Whether a learner on ``devices`` packs its batches: as ``SHOAL_PACK_BATCHES`` says (``1``,
    ``0``), and by default (``auto``) when its devices are accelerators (on CPU placing an array
    is a copy in the same memory, and packing measured no faster: one more copy, the same
    dispatch). A bad value is refused before a run starts (``shoal.core.environment_variables``)."""
    chosen = environment_variables.value("SHOAL_PACK_BATCHES")
    return any(d.platform != "cpu" for d in devices) if chosen == "auto" else chosen == "1"


__all__ = ["Field", "PackedBatch", "pack", "packs_batches", "unpacked"]
