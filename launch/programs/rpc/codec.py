"""The RPC codec: msgpack for structure, raw buffers for numpy arrays. Never pickle.

A frame is::

    b"SHL1" | uint32 header_length | msgpack header | pad | array buffers (each 16-byte aligned)

The header is the message with every array replaced by an extension record ``(dtype, shape,
offset)`` into the buffer section, so arrays are copied once when encoding and not at all when
decoding (decoded arrays are read-only views of the frame). Supported values: None, bool, int,
float, str, bytes, lists, tuples, dicts (any of these as keys), numpy arrays and scalars of
bool / int / uint / float / complex dtypes (and bfloat16), and anything with ``__array__``
(e.g. ``jax.Array``), which arrives as a numpy array. Anything else is refused with
``CodecError`` when encoding; a malformed frame raises ``CodecError`` when decoding.

Decoding is bounded, so that no frame can crash or exhaust the process that reads it: at most
``MAX_DEPTH`` nested containers (msgpack's own and tuple extensions alike; a deeper frame once
overflowed the C stack), at most ``MAX_ARRAYS`` arrays of at most ``MAX_DIMS`` dimensions, each
lying inside the frame, and a header no longer than the frame.
"""

from __future__ import annotations

import math
import struct
from typing import Any

import msgpack
import numpy as np

MAGIC = b"SHL1"
MAX_DEPTH = 32
MAX_ARRAYS = 100_000
MAX_DIMS = 32
_PREFIX = struct.Struct("<4sI")
_ALIGN = 16
_ARRAY, _TUPLE = 1, 2
_DTYPES = {np.dtype(t).str.lstrip("<>|="): np.dtype(t) for t in (
    np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
    np.float16, np.float32, np.float64, np.complex64, np.complex128)}
try:  # jax's bfloat16 (ml_dtypes) travels by name
    import ml_dtypes

    _DTYPES["bfloat16"] = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover
    pass
_DTYPE_NAMES = {dtype: name for name, dtype in _DTYPES.items()}


class CodecError(ValueError):
    """A value that cannot be sent, or bytes that are not a valid frame."""


def encode(obj: Any) -> bytes:
    buffers: list[np.ndarray] = []
    offset = 0

    def default(value: Any) -> Any:
        nonlocal offset
        if isinstance(value, tuple):
            return msgpack.ExtType(_TUPLE, _pack(list(value)))
        if isinstance(value, (np.ndarray, np.generic)) or hasattr(value, "__array__"):
            array = np.asarray(value)
            if not array.flags.c_contiguous:  # (np.ascontiguousarray would make 0-d arrays 1-d)
                array = array.copy(order="C")
            name = _DTYPE_NAMES.get(array.dtype)
            if name is None:
                raise CodecError(f"cannot send arrays of dtype {array.dtype}; supported: "
                                 f"{', '.join(sorted(_DTYPES))}")
            record = msgpack.packb([name, list(array.shape), offset])
            buffers.append(array)
            offset += -(-array.nbytes // _ALIGN) * _ALIGN
            return msgpack.ExtType(_ARRAY, record)
        raise CodecError(f"cannot send a value of type {type(value).__name__}: {value!r:.80}")

    def _pack(value: Any) -> bytes:
        return msgpack.packb(value, default=default, strict_types=True, use_bin_type=True)

    header = _pack(obj)
    parts = [_PREFIX.pack(MAGIC, len(header)), header]
    start = _PREFIX.size + len(header)
    parts.append(b"\0" * (-start % _ALIGN))
    for array in buffers:
        parts.append(array.reshape(-1).view(np.uint8).data)
        parts.append(b"\0" * (-array.nbytes % _ALIGN))
    return b"".join(parts)


def _check_depth(value: Any, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise CodecError(f"nesting deeper than {MAX_DEPTH} levels")
    if isinstance(value, (list, tuple)):
        for item in value:
            _check_depth(item, depth + 1)
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_depth(key, depth + 1)
            _check_depth(item, depth + 1)


def decode(frame: bytes) -> Any:
    if len(frame) < _PREFIX.size:
        raise CodecError(f"frame too short ({len(frame)} bytes)")
    magic, header_length = _PREFIX.unpack_from(frame)
    if magic != MAGIC:
        raise CodecError(f"not a shoal frame (magic {magic!r})")
    header_end = _PREFIX.size + header_length
    if header_end > len(frame):
        raise CodecError("frame truncated inside its header")
    data_start = header_end + (-header_end % _ALIGN)
    arrays = 0

    def ext_hook(code: int, payload: bytes, depth: int) -> Any:
        nonlocal arrays
        if code == _TUPLE:
            return tuple(_unpack(payload, depth + 1))
        if code != _ARRAY:
            raise CodecError(f"unknown extension type {code}")
        arrays += 1
        if arrays > MAX_ARRAYS:
            raise CodecError(f"more than {MAX_ARRAYS} arrays")
        try:
            name, shape, offset = msgpack.unpackb(payload, max_array_len=MAX_DIMS + 1)
            dtype = _DTYPES[name]
            shape = tuple(int(d) for d in shape)
            offset = int(offset)
        except (KeyError, TypeError, ValueError) as e:
            raise CodecError(f"bad array record: {e}") from None
        if len(shape) > MAX_DIMS or min(shape, default=0) < 0 or offset < 0:
            raise CodecError(f"bad array record: shape {list(shape)[:8]}, offset {offset}")
        count = math.prod(shape)  # exact (Python integers): no overflow to slip past the check
        begin = data_start + offset
        if begin + count * dtype.itemsize > len(frame):
            raise CodecError(f"array record points outside the frame: {name}{list(shape)} at {offset}")
        return np.frombuffer(frame, dtype, count, begin).reshape(shape)

    def _unpack(payload: bytes, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise CodecError(f"nesting deeper than {MAX_DEPTH} levels")
        value = msgpack.unpackb(payload, ext_hook=lambda code, data: ext_hook(code, data, depth),
                                raw=False, strict_map_key=False, use_list=True)
        _check_depth(value, depth)
        return value

    try:
        return _unpack(memoryview(frame)[_PREFIX.size:header_end], 0)
    except CodecError:
        raise
    except Exception as e:  # noqa: BLE001 -- any msgpack failure is a bad frame
        raise CodecError(f"malformed frame: {type(e).__name__}: {e}") from None
