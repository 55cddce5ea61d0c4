"""Settings with their accepted ranges, declared where they are defined, checked in one place.

    learning_rate: float = setting(1e-3, low=0.0, low_open=True, high=1.0)

``check_settings(config)`` checks every field of a dataclass that declares a range: numbers must
be of the field's type, finite, and inside ``[low, high]`` (an open end excludes the bound);
a tuple field (``items=True``) must be non-empty with every element in range; a ``bool`` field
must hold a bool (not ``"false"`` or ``0``); ``None`` passes only for an optional field. The
first bad value raises ``ValueError`` naming the field, the value, and what would be accepted.
``parse_setting(config_cls, key, text)`` reads a field's value from text (``--set KEY=VALUE``)
as the field's type.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import typing
from collections.abc import Mapping
from typing import Any


@dataclasses.dataclass(frozen=True)
class Range:
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    items: bool = False  # the value is a tuple of numbers, each in range

    def describe(self) -> str:
        def show(x: float) -> str:
            return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else f"{x:g}"

        low = "-inf" if self.low is None else show(self.low)
        high = "inf" if self.high is None else show(self.high)
        return f"{'(' if self.low_open or self.low is None else '['}{low}, {high}{')' if self.high_open or self.high is None else ']'}"

    def contains(self, x: float) -> bool:
        if self.low is not None and (x < self.low or (self.low_open and x == self.low)):
            return False
        return self.high is None or not (x > self.high or (self.high_open and x == self.high))


def setting(
    default: Any,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
    items: bool = False,
) -> Any:
    """A dataclass field with ``default`` whose values must lie in the given range."""
    metadata = {"range": Range(low, high, low_open, high_open, items)}
    if isinstance(default, (list, dict, set)):
        return dataclasses.field(default_factory=lambda: type(default)(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def parse_setting(config_cls: type, key: str, text: str) -> Any:
    """``text`` as a value of field ``key`` of the dataclass ``config_cls``: ``none`` for an
    optional field, ``true``/``false`` for a bool, ``1,2,3`` for a tuple of ints."""
    fields = {f.name: f for f in dataclasses.fields(config_cls)}
    if key not in fields:
        raise ValueError(f"unknown setting {key!r}; known: {', '.join(sorted(fields))}")
    kind, optional = _kind(typing.get_type_hints(config_cls)[key])
    text = text.strip()
    if optional and text.lower() == "none":
        return None
    try:
        if kind is bool:
            if text.lower() not in ("true", "false", "1", "0"):
                raise ValueError(text)
            return text.lower() in ("true", "1")
        if kind is tuple:
            return tuple(int(v) for v in text.split(",") if v)
        return kind(text)
    except ValueError:
        default = fields[key].default
        raise ValueError(f"--set {key}={text!r}: expected a {kind.__name__} like {default!r}") from None


def _kind(hint: Any) -> tuple[type, bool]:
    """``(number type, optional)`` of a field's type hint."""
    args = typing.get_args(hint)
    optional = type(None) in args
    if optional:
        hint = next(a for a in args if a is not type(None))
    return (typing.get_origin(hint) or hint), optional


def _is_bool(hint: Any) -> bool:
    """Whether a field's type hint is ``bool`` or ``bool | None`` (not ``bool | str``)."""
    return [a for a in (typing.get_args(hint) or (hint,)) if a is not type(None)] == [bool]


def check_settings(config: Any, prefix: str = "", names: Mapping[str, str] | None = None) -> None:
    """Raises ``ValueError`` for the first field of ``config`` out of its declared range, named
    ``prefix`` + its name (``names``: another name for a field, e.g. its flag's)."""
    hints = typing.get_type_hints(type(config))
    for field in dataclasses.fields(config):
        accepted: Range | None = field.metadata.get("range")
        kind, optional = _kind(hints[field.name])
        value = getattr(config, field.name)
        name = f"{prefix}{(names or {}).get(field.name, field.name)}"
        if value is None and optional:
            continue
        if _is_bool(hints[field.name]) and not isinstance(value, bool):  # ("false" or 0: read as truth values)
            raise ValueError(f"{name} must be true or false, got {value!r}")
        if accepted is None:
            continue
        values = value if accepted.items else (value,)
        if accepted.items and (not isinstance(value, (tuple, list)) or not value):
            raise ValueError(f"{name} must be a non-empty list of numbers in {accepted.describe()}, got {value!r}")
        for x in values:
            number_kind = int if accepted.items else kind
            ok_type = (
                (isinstance(x, numbers.Integral) and not isinstance(x, bool))
                if number_kind is int
                else isinstance(x, numbers.Real) and not isinstance(x, bool)
            )
            if not ok_type or not math.isfinite(x) or not accepted.contains(x):
                what = "an integer" if number_kind is int else "a finite number"
                raise ValueError(f"{name} must be {what} in {accepted.describe()}, got {value!r}")
