"""A Reverb table's counts, read from its ``TableInfo`` proto without TensorFlow.

Reverb's ``schema_pb2`` (which decodes ``TableInfo``) imports TensorFlow's protos, and with
them TensorFlow's Python package. The one-process runner's pacing reads a table's sample count
after each vector step of an on-policy run, from its first step; so the few fields it reads are
decoded here from protobuf's wire format (``reverb/cc/schema.proto``):

    TableInfo:        name = 8, rate_limiter_info = 5, current_size = 7
    RateLimiterInfo:  samples_per_insert = 1, min_diff = 2, max_diff = 3 (doubles),
                      min_size_to_sample = 4, insert_stats = 5, sample_stats = 6
    RateLimiterCallStats:  completed = 2
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

_VARINT, _FIXED64, _LENGTH_DELIMITED, _FIXED32 = 0, 1, 2, 5


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[at]
        value |= (byte & 0x7F) << shift
        at, shift = at + 1, shift + 7
        if not byte & 0x80:
            return value, at


def _fields(data: bytes) -> Iterator[tuple[int, Any]]:
    """``(field number, value)`` of each field of a message: ints, doubles or bytes."""
    at = 0
    value: Any
    while at < len(data):
        key, at = _varint(data, at)
        number, wire = key >> 3, key & 7
        if wire == _VARINT:
            value, at = _varint(data, at)
        elif wire == _FIXED64:
            value, at = struct.unpack_from("<d", data, at)[0], at + 8
        elif wire == _LENGTH_DELIMITED:
            size, at = _varint(data, at)
            value, at = data[at : at + size], at + size
        elif wire == _FIXED32:
            value, at = data[at : at + 4], at + 4
        else:
            raise ValueError(f"TableInfo: wire type {wire} of field {number} is not protobuf's")
        yield number, value


def _int64(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _completed(data: bytes) -> int:
    return _int64(next((v for n, v in _fields(data) if n == 2), 0))


def table_info(data: bytes) -> SimpleNamespace:
    """``name``, ``current_size`` and ``rate_limiter_info`` (its ``samples_per_insert``,
    ``min_diff``, ``max_diff``, ``min_size_to_sample``, ``insert_stats.completed`` and
    ``sample_stats.completed``) of a serialized ``TableInfo``, as Reverb's proto names them."""
    info = SimpleNamespace(name="", current_size=0)
    limiter = SimpleNamespace(
        samples_per_insert=0.0,
        min_diff=0.0,
        max_diff=0.0,
        min_size_to_sample=0,
        insert_stats=SimpleNamespace(completed=0),
        sample_stats=SimpleNamespace(completed=0),
    )
    for number, value in _fields(data):
        if number == 8:
            info.name = value.decode()
        elif number == 7:
            info.current_size = _int64(value)
        elif number == 5:
            for inner, field in _fields(value):
                if inner in (1, 2, 3):
                    setattr(limiter, ("samples_per_insert", "min_diff", "max_diff")[inner - 1], field)
                elif inner == 4:
                    limiter.min_size_to_sample = _int64(field)
                elif inner in (5, 6):
                    getattr(limiter, "insert_stats" if inner == 5 else "sample_stats").completed = _completed(field)
    info.rate_limiter_info = limiter
    return info
