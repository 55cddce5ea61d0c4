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
lying inside the frame, and a header no longer than the frame. What the header may expand to is
counted while it is decoded: at most ``MAX_ITEMS`` items in all, where every list or tuple
element, map key and map value counts one, every list or tuple ``CONTAINER_ITEMS`` more and
every map ``MAP_ITEMS`` more (roughly what each costs Python, in pointers). A container that
declares more items than that is refused from its header, before anything is allocated for it
(a 100 MB array of 100 M nils once cost a node ~1 GB and 99 s of CPU); the total is checked as
each container completes, and the bytes copied for tuple extensions are bounded by four times
the header (plus 1 MiB). So decoding costs at most ~8 bytes per byte of header (the pointers of
containers not yet complete) plus what ``MAX_ITEMS`` small objects cost (~64 MB at the very
most, e.g. a million short strings), and a refusal comes within about a second. Bulk data
belongs in numpy arrays, which are views of the frame and cost nothing to decode.
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
MAX_ITEMS = 1 << 20
CONTAINER_ITEMS = 8  # what a list or tuple costs beyond its elements (an empty list: ~8 pointers)
MAP_ITEMS = 32  # and a map (a small dict: ~30 pointers)
_EXT_BYTES_SLACK = 1 << 20  # tuple payloads copied in all: at most 4x the header + this
_PREFIX = struct.Struct("<4sI")
_ALIGN = 16
_ARRAY, _TUPLE = 1, 2
_DTYPES = {
    np.dtype(t).str.lstrip("<>|="): np.dtype(t)
    for t in (
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
    )
}
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
                raise CodecError(f"cannot send arrays of dtype {array.dtype}; supported: {', '.join(sorted(_DTYPES))}")
            record = msgpack.packb([name, list(array.shape), offset])
            buffers.append(array)
            offset += -(-array.nbytes // _ALIGN) * _ALIGN
            return msgpack.ExtType(_ARRAY, record)
        raise CodecError(f"cannot send a value of type {type(value).__name__}: {value!r:.80}")

    def _pack(value: Any) -> bytes:
        return msgpack.packb(value, default=default, strict_types=True, use_bin_type=True)

    header = _pack(obj)
    parts: list[bytes | memoryview] = [_PREFIX.pack(MAGIC, len(header)), header]
    start = _PREFIX.size + len(header)
    parts.append(b"\0" * (-start % _ALIGN))
    for array in buffers:
        parts.append(array.reshape(-1).view(np.uint8).data)
        parts.append(b"\0" * (-array.nbytes % _ALIGN))
    return b"".join(parts)


def _check_depth(value: Any, depth: int) -> None:
    """Raises if anything in ``value`` (a container at ``depth``) lies deeper than ``MAX_DEPTH``."""
    if depth > MAX_DEPTH or (depth == MAX_DEPTH and len(value)):
        raise CodecError(f"nesting deeper than {MAX_DEPTH} levels")
    if isinstance(value, dict):
        for key, item in value.items():
            if type(key) is tuple:
                _check_depth(key, depth + 1)
            if type(item) in _CONTAINERS:
                _check_depth(item, depth + 1)
    else:
        for item in value:  # (only containers go deeper: leaves are not walked)
            if type(item) in _CONTAINERS:
                _check_depth(item, depth + 1)


_CONTAINERS = (list, tuple, dict)


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
    arrays = items = ext_bytes = 0

    def spend(n: int) -> None:
        nonlocal items
        items += n
        if items > MAX_ITEMS:
            raise CodecError(f"more than {MAX_ITEMS:,} items in one message (send bulk data as numpy arrays)")

    def list_hook(value: list) -> list:
        spend(len(value) + CONTAINER_ITEMS)
        return value

    def object_hook(value: dict) -> dict:
        spend(2 * len(value) + MAP_ITEMS)
        return value

    def ext_hook(code: int, payload: bytes, depth: int) -> Any:
        nonlocal arrays, ext_bytes
        if code == _TUPLE:
            ext_bytes += len(payload)  # (msgpack copied it: nested tuples copy their contents again)
            if ext_bytes > 4 * header_length + _EXT_BYTES_SLACK:
                raise CodecError(f"tuples nested around {ext_bytes:,} bytes of a {header_length:,}-byte header")
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

    def _unpack(payload: bytes | memoryview, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise CodecError(f"nesting deeper than {MAX_DEPTH} levels")
        try:
            value = msgpack.unpackb(
                payload,
                ext_hook=lambda code, data: ext_hook(code, data, depth),
                raw=False,
                strict_map_key=False,
                use_list=True,
                list_hook=list_hook,
                object_hook=object_hook,
                max_array_len=MAX_ITEMS - CONTAINER_ITEMS,
                max_map_len=(MAX_ITEMS - MAP_ITEMS) // 2,
            )
        except CodecError:
            raise
        except ValueError as e:
            if "exceeds max_" not in str(e):  # (msgpack refuses a container from its header)
                raise
            raise CodecError(
                f"a container of more than {MAX_ITEMS:,} items ({e}); send bulk data as numpy arrays"
            ) from None
        if type(value) in _CONTAINERS:
            _check_depth(value, depth)
        elif depth > MAX_DEPTH:
            raise CodecError(f"nesting deeper than {MAX_DEPTH} levels")
        return value

    try:
        return _unpack(memoryview(frame)[_PREFIX.size : header_end], 0)
    except CodecError:
        raise
    except Exception as e:  # noqa: BLE001 -- any msgpack failure is a bad frame
        raise CodecError(f"malformed frame: {type(e).__name__}: {e}") from None
