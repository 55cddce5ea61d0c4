"""A table signature as the bytes Reverb's server takes, written without TensorFlow.

``reverb.Table`` hands its C++ table a signature serialized as TensorFlow's
``StructuredValue`` proto (``tensorflow/core/protobuf/struct.proto``), which it makes with
TensorFlow's ``nested_structure_coder``. Shoal's signatures are nests of dicts, tuples and lists
whose leaves are ``(name, shape, dtype)`` specs, a small corner of that proto, written here in
protobuf's wire format by hand:

    StructuredValue:  list_value = 51, tuple_value = 52, dict_value = 53, tensor_spec_value = 33
    ListValue / TupleValue:  repeated StructuredValue values = 1
    DictValue:  map<string, StructuredValue> fields = 1  (entries: key = 1, value = 2)
    TensorSpecProto:  name = 1, TensorShapeProto shape = 2, DataType dtype = 3
    TensorShapeProto:  repeated Dim dim = 2;  Dim: int64 size = 1  (-1: unknown)

Dict keys are written sorted (a map's order carries no meaning). ``tests/test_signature_proto.py``
parses these bytes with TensorFlow's own proto classes and compares them with its encoder's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

# tensorflow/core/framework/types.proto
DATA_TYPES = {
    np.dtype(np.float32): 1,
    np.dtype(np.float64): 2,
    np.dtype(np.int32): 3,
    np.dtype(np.uint8): 4,
    np.dtype(np.int16): 5,
    np.dtype(np.int8): 6,
    np.dtype(np.int64): 9,
    np.dtype(bool): 10,
    np.dtype(np.uint16): 17,
    np.dtype(np.float16): 19,
    np.dtype(np.uint32): 22,
    np.dtype(np.uint64): 23,
}
_VARINT, _LENGTH_DELIMITED = 0, 2


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # (a negative int64 is written as its 64-bit two's complement)
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | _LENGTH_DELIMITED) + _varint(len(payload)) + payload


def _int_field(number: int, value: int) -> bytes:
    return _varint(number << 3 | _VARINT) + _varint(value)


def tensor_spec(name: str, shape: Sequence[int | None], dtype: Any) -> bytes:
    """A ``TensorSpecProto``: ``shape`` with ``None`` for a dimension of unknown size."""
    dtype = np.dtype(dtype)
    if dtype not in DATA_TYPES:
        raise ValueError(
            f"dtype {dtype} has no TensorFlow DataType here; accepted: {', '.join(sorted(str(d) for d in DATA_TYPES))}"
        )
    dims = b"".join(_field(2, _int_field(1, -1 if size is None else int(size))) for size in shape)
    return _field(1, name.encode()) + _field(2, dims) + _int_field(3, DATA_TYPES[dtype])


def encode_structure(nest: Any, leaf: Any = None) -> bytes:
    """The ``StructuredValue`` of ``nest`` (dicts, tuples, lists); ``leaf(x)`` gives a leaf's
    ``(name, shape, dtype)`` (default: the leaf's ``name``, ``shape`` and ``dtype`` attributes)."""
    if isinstance(nest, Mapping):
        entries = b"".join(
            _field(1, _field(1, str(key).encode()) + _field(2, encode_structure(nest[key], leaf)))
            for key in sorted(nest)
        )
        return _field(53, entries)
    if isinstance(nest, (tuple, list)):
        values = b"".join(_field(1, encode_structure(value, leaf)) for value in nest)
        return _field(52 if isinstance(nest, tuple) else 51, values)
    name, shape, dtype = leaf(nest) if leaf else (nest.name, nest.shape, nest.dtype)
    return _field(33, tensor_spec(name or "", shape, dtype))
