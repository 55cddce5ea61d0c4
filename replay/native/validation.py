"""What a native replay server takes from a call, checked before anything is stored.

A replay node trusts no call, authenticated or not: one bad insert stored (a step of the wrong
shape, an item of a negative length, a NaN reward) would fail the learner's next sample, and with
it the whole run. So every ``insert`` is checked here first, and a bad one is refused with one
``ValueError`` to its caller (the tables and the step store untouched, the server serving on):

* **steps**: each group's indices a 1-D integer array, each column an array of numbers with one
  row per index, floats finite (no NaN, no inf: ``np.isfinite`` per column), no index sent twice
  nor one the server already holds for the writer;
* **items**: four arrays that add up (a table, a priority, a length and the step indices of
  each), tables the server has, lengths >= 1 lying inside the call's indices, priorities finite
  and >= 0 (``check_priorities``: ``mutate_priorities``' rule too), every step an item names sent
  in this call or held from an earlier one of the writer;
* **one-step items sent whole** (``insert_items``): per run a table the server has, a 1-D
  array of priorities (the rule above), and one column per signature leaf holding a row per item,
  of the leaf's shape and dtype, floats finite;
* **signatures**: an item of one step takes steps whose columns have the shapes and dtypes of
  its table's signature leaves (``tree.flatten`` order, as the adders write them); a longer one,
  of ``length`` steps, needs a signature whose leaves all lead with ``length`` and steps of the
  rest of each shape. A table's items all have one length (the first it took, or restored): a
  sample stacks them.

The checks cost per call, not per step: one reduction per float column (``np.isfinite``), a
comparison of shapes and dtypes per group of steps (a column per run of one layout) and per
(table, length, layout) of the call's items, and a set of the call's step indices.
``MAX_SAMPLE_ITEMS`` bounds what one ``sample`` call may ask for (``check_num_items``).
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import math
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import tree

# The most items one sample call may ask for: far more than a learner's batch (Shoal's agents
# ask for a few hundred items a batch); the client asks for a larger batch in several calls.
MAX_SAMPLE_ITEMS = 65_536
MAX_WAIT_S = 86_400.0  # the longest a call may wait on a table's rate limiter (a day)

Layout = tuple  # per column, ``(shape, dtype.str)``: a step's, or a signature leaf's


def layout_text(layout: Layout) -> str:
    return "[" + ", ".join(f"{np.dtype(d).name}{list(s)}" for s, d in layout) + "]"


@dataclasses.dataclass(frozen=True)
class Accepts:
    """The steps a table's items may hold: ``one`` (a one-step item's columns), ``longer``
    (``(length, columns)`` of the longer items, when every leaf leads with that length), and
    ``names`` (each column's path in the signature); ``one`` is ``None`` for a table without a
    signature (any layout)."""

    one: Layout | None
    longer: tuple[int, Layout] | None
    names: tuple[str, ...]

    @classmethod
    def of(cls, signature: Any) -> Accepts:
        if signature is None:
            return cls(None, None, ())
        paths = tree.flatten_with_path(signature)
        leaves = [
            (tuple(int(n) for n in spec.shape), np.dtype(getattr(spec.dtype, "as_numpy_dtype", spec.dtype)).str)
            for _, spec in paths
        ]
        names = tuple(".".join(str(p) for p in path) or "(the leaf)" for path, _ in paths)
        heads = {shape[0] if shape else 0 for shape, _ in leaves}
        longer = None
        if len(heads) == 1 and min(heads) >= 1:
            longer = (heads.pop(), tuple((shape[1:], dtype) for shape, dtype in leaves))
        return cls(tuple(leaves), longer, names)

    def steps_of(self, table: str, length: int) -> list[Layout] | None:
        """What each step of an item of ``length`` steps may hold (``None``: anything); a
        ``ValueError`` if the table takes no item of that length. (A one-step item's steps hold
        the leaves' shapes, or, where every leaf leads with 1, the rest of them.)"""
        if self.one is None:
            return None
        if length == 1:
            return [self.one] + ([self.longer[1]] if self.longer is not None and self.longer[0] == 1 else [])
        if self.longer is None or self.longer[0] != length:
            takes = (
                "one-step items"
                if self.longer is None or self.longer[0] == 1
                else f"items of 1 or {self.longer[0]} steps"
            )
            raise ValueError(f"replay table {table!r} takes {takes} (its signature), not one of {length} steps")
        return [self.longer[1]]


@dataclasses.dataclass
class Insert:
    """A checked insert: the step groups ``(indices, columns, layout)`` and the items' tables,
    priorities and step indices (``step_lists``), the indices to release (lists)."""

    groups: list
    tables: list
    priorities: list
    step_lists: list
    release: list


def check_priorities(values: Any) -> list[float]:
    """``values`` as floats if every one is a finite number >= 0 (the one rule for priorities,
    inserted or mutated), else a ``ValueError`` naming the first that is not."""
    try:
        listed = np.asarray(values, np.float64).reshape(-1).tolist()
    except (TypeError, ValueError):
        raise ValueError(f"priorities must be finite numbers >= 0, got {_short(values)}") from None
    if listed and not (math.isfinite(sum(listed)) and min(listed) >= 0):  # (a NaN or an inf makes the sum one)
        bad = next((p for p in listed if not (math.isfinite(p) and p >= 0)), None)
        if bad is not None:
            raise ValueError(f"priorities must be finite numbers >= 0, got {bad}")
    return listed


def check_timeout(timeout_s: Any) -> float:
    """A call's ``timeout_s``, if a number in ``[0, MAX_WAIT_S]``."""
    try:
        value = float(timeout_s)
    except (TypeError, ValueError):
        value = float("nan")
    if isinstance(timeout_s, (bool, np.bool_)) or not 0 <= value <= MAX_WAIT_S:
        raise ValueError(f"a call's timeout_s must be a number in [0, {MAX_WAIT_S:g}] seconds, got {_short(timeout_s)}")
    return value


def check_num_items(num_items: Any) -> int:
    """``num_items`` of a sample call, if an integer in ``[1, MAX_SAMPLE_ITEMS]``."""
    if (
        isinstance(num_items, (bool, np.bool_))
        or not isinstance(num_items, (int, np.integer))
        or not (1 <= num_items <= MAX_SAMPLE_ITEMS)
    ):
        raise ValueError(
            f"a sample asks for 1 to {MAX_SAMPLE_ITEMS:,} items (MAX_SAMPLE_ITEMS), got {_short(num_items)}"
        )
    return int(num_items)


class CallChecker:
    """Checks the calls of a server of ``tables`` (``TableSpec``s): see the module docstring."""

    def __init__(self, tables: Sequence[Any]) -> None:
        self._accepts = {table.name: Accepts.of(table.signature) for table in tables}
        self._lengths: dict[str, int] = {}  # table -> the one length of its items (once it took one)
        self._lock = threading.Lock()

    @property
    def table_names(self) -> list[str]:
        return list(self._accepts)

    def accepts(self, table: str) -> Accepts:
        if not isinstance(table, str) or table not in self._accepts:
            raise ValueError(f"replay table {_short(table)} is not served here; tables: {', '.join(self._accepts)}")
        return self._accepts[table]

    def pin_length(self, table: str, length: int) -> None:
        """Records that ``table``'s items have ``length`` steps; a ``ValueError`` if it holds
        items of another length."""
        with self._lock:
            have = self._lengths.setdefault(table, length)
        if have != length:
            raise ValueError(
                f"replay table {table!r} holds items of {have} steps; an item of {length} steps "
                "cannot be sampled with them"
            )

    def check_insert(self, steps: Any, items: Any, release: Any, held: Callable[[list[int]], list]) -> Insert:
        """``NativeReplayServer.insert``'s arguments, checked (module docstring); ``held(indices)``:
        the layout of each of the writer's steps the server holds, ``None`` where it holds none."""
        groups = [_group(g) for g in _list(steps, "steps")]
        tables, priorities, lengths, flat = _items(items)
        release_ids = _indices(release, "release")
        new = [i for indices, _, _ in groups for i in indices]
        new_set = set(new)
        if len(new_set) != len(new):
            twice = next(i for i, n in collections.Counter(new).items() if n > 1)
            raise ValueError(f"an insert sends step {twice} twice")
        again = [i for i, layout in zip(new, held(new)) if layout is not None] if new else []
        if again:
            raise ValueError(f"an insert sends step {again[0]} again: the server holds it for this writer already")
        earlier = sorted(set(flat) - new_set)
        found = held(earlier) if earlier else []
        missing = [i for i, layout in zip(earlier, found) if layout is None]
        if missing:
            raise ValueError(
                f"an item references steps {missing[:3]} that this call does not send and the server does "
                "not hold for this writer"
            )
        ends = list(itertools.accumulate(lengths))
        step_lists = [flat[ends[j - 1] if j else 0 : ends[j]] for j in range(len(ends))]
        kinds = list(dict.fromkeys(zip(tables, lengths)))
        expected = [self.accepts(table).steps_of(table, length) for table, length in kinds]
        layouts = {layout for _, _, layout in groups} | set(found)
        if len(layouts) == 1:  # (the usual call: every step it names has one layout)
            seen = [layouts] * len(kinds)
        else:  # (steps of several layouts: which items hold which)
            layout_of = {i: layout for indices, _, layout in groups for i in indices}
            layout_of.update(zip(earlier, found))
            by_kind: dict[tuple, set] = {kind: set() for kind in kinds}
            for kind, item in zip(zip(tables, lengths), step_lists):
                by_kind[kind].update(map(layout_of.__getitem__, item))
            seen = [by_kind[kind] for kind in kinds]
        for (table, length), want, got in zip(kinds, expected, seen):
            bad = [layout for layout in got if want is not None and layout not in want]
            if bad and want is not None:
                raise ValueError(_mismatch(table, length, self._accepts[table].names, want[0], bad[0]))
        for table, length in kinds:
            self.pin_length(table, length)
        return Insert(groups, tables, priorities, step_lists, release_ids)

    def check_items(self, runs: Any) -> list[tuple[str, list[float], list[np.ndarray]]]:
        """``NativeReplayServer.insert_items``' runs ``[table, priorities, columns]``, checked
        (module docstring): tables the server has, priorities a 1-D array of finite numbers >= 0,
        one array of numbers per signature leaf with a row per priority, of the leaf's shape and
        dtype, floats finite; and the table takes one-step items."""
        checked = []
        for run in _list(runs, "an insert of items"):
            parts = _list(run, "a run of items")
            if len(parts) != 3:
                raise ValueError(f"a run of items is [table, priorities, columns], got {len(parts)} parts")
            table, priorities, columns = parts
            accepts = self.accepts(table)
            if not isinstance(priorities, np.ndarray) or priorities.ndim != 1:
                raise ValueError(f"a run's priorities must be a 1-D array, got {_short(priorities)}")
            listed = check_priorities(priorities)
            what = f"a run of {len(listed)} items of replay table {table!r}"
            if not _list(columns, "a run's columns"):
                raise ValueError(f"{what} has no columns (one array per signature leaf)")
            layout = check_columns(columns, len(listed), what)
            want = accepts.steps_of(table, 1)
            if want is not None and layout not in want:
                raise ValueError(_mismatch(table, 1, accepts.names, want[0], layout))
            if listed:
                checked.append((table, listed, list(columns)))
        for table in dict.fromkeys(table for table, _, _ in checked):
            self.pin_length(table, 1)
        return checked


def restore_checks(checker: CallChecker, table: str, length: int, layout: Layout) -> None:
    """A restored item of ``table`` (``length`` steps of ``layout``) as an insert's is checked."""
    accepts = checker.accepts(table)
    want = accepts.steps_of(table, length)
    if want is not None and layout not in want:
        raise ValueError(_mismatch(table, length, accepts.names, want[0], layout))
    checker.pin_length(table, length)


def check_columns(columns: Sequence[Any], rows: int, what: str) -> Layout:
    """The layout of ``columns`` (arrays of numbers, ``rows`` on the leading axis, floats finite)."""
    layout = []
    for c, column in enumerate(columns):
        if not isinstance(column, np.ndarray) or column.ndim < 1 or column.dtype.kind not in "biufc":
            raise ValueError(
                f"{what}: column {c} must be an array of numbers with the steps on its leading axis, "
                f"got {_short(column)}"
            )
        if len(column) != rows:
            raise ValueError(f"{what}: column {c} holds {len(column)} steps, its indices {rows}")
        if column.dtype.kind in "fc" and not _finite(column):
            raise ValueError(f"{what}: column {c} ({column.dtype.name}) holds NaN or inf; replay keeps finite numbers")
        layout.append((column.shape[1:], column.dtype.str))
    return tuple(layout)


def _finite(column: np.ndarray) -> bool:
    """Whether every number of a float column is finite: a small one's sum is (one reduction, no
    temporary: NaN and inf propagate; a sum that overflows is checked element by element)."""
    if column.dtype.kind == "f" and column.size <= 4096 and math.isfinite(np.add.reduce(column, axis=None)):
        return True
    return bool(np.isfinite(column).all())


def _mismatch(table: str, length: int, names: tuple, want: Layout, got: Layout) -> str:
    what = f"an item of {length} step{'s' if length > 1 else ''} of replay table {table!r}"
    if len(want) != len(got):
        return f"{what} has steps of {len(got)} columns; its signature has {len(want)} ({', '.join(names)})"
    c = next(c for c in range(len(want)) if want[c] != got[c])
    return (
        f"{what}: column {c} ({names[c]}) of its steps is {layout_text(got[c : c + 1])[1:-1]}; its signature "
        f"says {layout_text(want[c : c + 1])[1:-1]}"
    )


def _group(group: Any) -> tuple[list[int], list, Layout]:
    pair = _list(group, "a step group")
    if len(pair) != 2:
        raise ValueError(f"a step group is [indices, columns], got {_short(group)}")
    indices = _indices(pair[0], "a step group's indices")
    columns = _list(pair[1], "a step group's columns")
    return indices, columns, check_columns(columns, len(indices), "a step group")


def _items(items: Any) -> tuple[list, list, list, list]:
    parts = _list(items, "items")
    if len(parts) != 4:
        raise ValueError(f"items are [tables, priorities, lengths, step indices], got {len(parts)} parts")
    tables = parts[0].tolist() if isinstance(parts[0], np.ndarray) else _list(parts[0], "the items' tables")
    if not all(isinstance(table, str) for table in tables):
        raise ValueError(f"the items' tables must be table names, got {_short(tables)}")
    priorities = check_priorities(parts[1])
    lengths = _indices(parts[2], "the items' lengths", low=None)
    if lengths and min(lengths) < 1:
        raise ValueError(f"an item's length must be >= 1 step, got {min(lengths)}")
    flat = _indices(parts[3], "the items' step indices")
    if not (len(tables) == len(priorities) == len(lengths)) or sum(lengths) != len(flat):
        raise ValueError(
            f"an insert of {len(tables)} tables, {len(priorities)} priorities, "
            f"{len(lengths)} lengths and {len(flat)} step indices does not add up"
        )
    return tables, priorities, lengths, flat


def _indices(values: Any, what: str, low: int | None = 0) -> list[int]:
    """A 1-D array of integers (``>= low`` unless it is ``None``, below 2**63) as a list."""
    try:
        array = values if isinstance(values, np.ndarray) else np.asarray(values if isinstance(values, list) else None)
    except (TypeError, ValueError):
        array = np.asarray(None)
    listed = array.tolist() if array.ndim == 1 and (array.dtype.kind in "iu" or array.size == 0) else None
    if listed is None or listed and (low is not None and min(listed) < low or max(listed) >= 2**63):
        raise ValueError(
            f"{what} must be a 1-D array of integers below 2**63{'' if low is None else f' and >= {low}'}, "
            f"got {_short(values)}"
        )
    return listed


def _list(value: Any, what: str) -> list:
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"{what} must be a list, got {_short(value)}")
    return list(value)


def _short(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"an array of {value.dtype.name}{list(value.shape)}"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


__all__ = [
    "MAX_SAMPLE_ITEMS",
    "MAX_WAIT_S",
    "Accepts",
    "CallChecker",
    "check_columns",
    "check_num_items",
    "check_priorities",
    "check_timeout",
]
