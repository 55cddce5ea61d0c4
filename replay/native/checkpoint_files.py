"""A native replay checkpoint read back, every part of it checked first.

``NativeReplayServer.checkpoint`` writes ``<checkpoint_dir>/<name>/``: ``tables.json`` (each
table's counts, sampler state and items, an item's steps as ``[layout, row]`` places),
``steps.npz`` (array ``l<layout>_c<column>`` holds that column of the layout's steps, one row a
step; a column of frame stacks is two arrays instead, ``..._frames`` its distinct frames
``[count, height, width]`` uint8 and ``..._index`` per step its planes' indices into them, so
that a frame that several stacks show is written once) and, last, ``DONE``. A checkpoint that is incomplete, truncated or edited is refused in one
``ValueError`` naming the file and what is wrong with it, before a server takes anything from
it (never a ``BadZipFile``, ``KeyError`` or ``IndexError`` from deep in a restore):

* ``check_checkpoint(path)``: cheap, nothing but the arrays' headers read (what a resumed run
  checks before it starts anything);
* ``read_checkpoint(path, checker)``: the whole checkpoint, its steps checked as an insert's
  (``shoal.replay.native.validation``: each table's signature, finite numbers).
"""

from __future__ import annotations

import json
import math
import os
import zipfile
from typing import Any

import numpy as np

from shoal.replay.native.columns import Pooled
from shoal.replay.native.validation import CallChecker, check_columns, restore_checks

FORMAT = 1
FILES = ("tables.json", "steps.npz", "DONE")
MAX_COLUMNS = 100_000


class Damaged(ValueError):
    """A native replay checkpoint that cannot be restored (the message names the file)."""


def check_checkpoint(path: str) -> None:
    """Raises ``Damaged`` (one line) unless ``path`` holds a complete native replay checkpoint
    whose ``tables.json`` fits its format and names only steps ``steps.npz`` holds."""
    _complete(path)
    _check_places(path, read_record(path), array_headers(path))


def read_checkpoint(path: str, checker: CallChecker) -> tuple[dict[str, Any], list[list[Any]]]:
    """``path``'s record (``tables.json``) and its steps, a block of columns per layout (an
    array, or ``Pooled`` for a column of frame stacks: rebuilt by the restore a chunk at a time),
    every part checked (module docstring); ``checker`` (the server's) learns each table's item
    length."""
    _complete(path)
    record = read_record(path)
    arrays = _arrays(path)
    _check_places(path, record, {name: (array.shape, array.dtype) for name, array in arrays.items()})
    file = os.path.join(path, "steps.npz")
    blocks = [[_column(file, arrays, n, c) for c in range(count)] for n, count in enumerate(record["layouts"])]
    layouts = []
    for n, block in enumerate(blocks):
        rows = len(block[0].indices if isinstance(block[0], Pooled) else block[0])
        # (a column of frame stacks is checked as a view of its first stack on every row: no copy)
        shown = [
            np.broadcast_to(c.rebuilt(0, 1), (rows, *c.indices.shape[1:], *c.frames.shape[1:]))
            if isinstance(c, Pooled)
            else c
            for c in block
        ]
        try:
            layouts.append(check_columns(shown, rows, f"layout {n}"))
        except ValueError as e:
            raise Damaged(f"{file}: {e}: the replay checkpoint is damaged and cannot be restored") from None
    unknown = sorted(set(record["tables"]) - set(checker.table_names))
    if unknown:
        raise Damaged(
            f"{path}: the checkpoint holds tables {unknown} this run does not have ({', '.join(checker.table_names)})"
        )
    for name, saved in record["tables"].items():
        kinds = {(len(steps), number) for _, _, _, steps in saved["items"] for number, _ in steps}
        try:
            checker.accepts(name)
            for length, number in sorted(kinds):
                restore_checks(checker, name, length, layouts[number])
        except ValueError as e:
            raise Damaged(f"{path}: {e}: the checkpoint does not fit this server's tables") from None
    return record, blocks


def _column(file: str, arrays: dict[str, np.ndarray], n: int, c: int) -> Any:
    """Column ``c`` of layout ``n``: its array, or ``Pooled`` (its indices checked to lie in its frames)."""
    name = f"l{n}_c{c}"
    if name in arrays:
        return arrays[name]
    frames, index = arrays[f"{name}_frames"], arrays[f"{name}_index"]
    if index.size and (int(index.min()) < 0 or int(index.max()) >= len(frames)):
        raise Damaged(
            f"{file}: {name}_index names frames outside the {len(frames)} of {name}_frames: the replay "
            "checkpoint is damaged"
        )
    return Pooled(frames, index)


def read_record(path: str) -> dict[str, Any]:
    """``tables.json`` of the checkpoint at ``path``, its structure checked."""
    file = os.path.join(path, "tables.json")
    try:
        with open(file, "rb") as f:
            record = json.loads(f.read().decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise Damaged(f"{file}: cannot be read ({_reason(e)}): the replay checkpoint is damaged") from None
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        raise Damaged(
            f"{file} is not a native replay checkpoint (format {FORMAT}); a Reverb checkpoint needs --replay reverb"
        )
    layouts: Any = record.get("layouts")
    _expect(
        file,
        "layouts",
        isinstance(layouts, list) and all(_int(n, 1, MAX_COLUMNS) for n in layouts),
        "a list of column counts",
        layouts,
    )
    tables: Any = record.get("tables")
    _expect(file, "tables", isinstance(tables, dict), "an object of tables", tables)
    for name, saved in tables.items():
        where = f"tables.{name}"
        _expect(
            file,
            where,
            isinstance(saved, dict) and isinstance(saved.get("items"), list) and isinstance(saved.get("counts"), dict),
            'an object with "counts" and "items"',
            saved,
        )
        counts = saved["counts"]
        for key in ("inserts", "samples", "deletes"):
            _expect(file, f"{where}.counts.{key}", _int(counts.get(key), 0, 2**62), "an integer >= 0", counts.get(key))
        _expect(
            file,
            f"{where}.counts.rng",
            _rng_state(counts.get("rng")),
            "a numpy PCG64 generator state",
            counts.get("rng"),
        )
        keys = set()
        for i, item in enumerate(saved["items"]):
            ok = (
                isinstance(item, list)
                and len(item) == 4
                and _int(item[0], 1, 2**62)
                and item[0] not in keys
                and _number(item[1])
                and _int(item[2], 0, 2**62)
                and isinstance(item[3], list)
                and item[3]
                and all(
                    isinstance(p, list) and len(p) == 2 and _int(p[0], 0, len(layouts) - 1) and _int(p[1], 0, 2**62)
                    for p in item[3]
                )
            )
            _expect(
                file,
                f"{where}.items[{i}]",
                ok,
                "[key, priority >= 0, times sampled, [[layout, row], ...]] with a new key",
                item,
            )
            keys.add(item[0])
    return record


def array_headers(path: str) -> dict[str, tuple[tuple, np.dtype]]:
    """Each array of ``steps.npz``: its shape and dtype, read from its header alone."""
    file = os.path.join(path, "steps.npz")
    headers = {}
    try:
        with zipfile.ZipFile(file) as archive:
            for info in archive.infolist():
                with archive.open(info) as f:
                    version = np.lib.format.read_magic(f)
                    read = (
                        np.lib.format.read_array_header_1_0
                        if version == (1, 0)
                        else np.lib.format.read_array_header_2_0
                    )
                    shape, _, dtype = read(f)
                headers[info.filename.removesuffix(".npy")] = (tuple(shape), np.dtype(dtype))
    except Exception as e:  # noqa: BLE001 -- zipfile and numpy raise many kinds on a damaged file
        raise Damaged(f"{file}: cannot be read ({_reason(e)}): the replay checkpoint is damaged") from None
    return headers


def _arrays(path: str) -> dict[str, np.ndarray]:
    """Every array of ``steps.npz`` by name (``_check_places`` then says whether they fit)."""
    file = os.path.join(path, "steps.npz")
    try:
        with np.load(file, allow_pickle=False) as npz:
            return {name: npz[name] for name in npz.files}
    except Exception as e:  # noqa: BLE001 -- zipfile, zlib and numpy raise many kinds on a damaged file
        raise Damaged(f"{file}: cannot be read ({_reason(e)}): the replay checkpoint is damaged") from None


def _check_places(path: str, record: dict[str, Any], headers: dict[str, tuple]) -> None:
    """Every layout's columns are in ``steps.npz`` with one row a step, and every item's places lie there."""
    file = os.path.join(path, "steps.npz")
    rows = []
    for n, count in enumerate(record["layouts"]):
        shapes: list[Any] = [_header(file, headers, f"l{n}_c{c}") for c in range(count)]
        if None in shapes:
            c = shapes.index(None)
            raise Damaged(
                f"{file} lacks array l{n}_c{c} that tables.json's layouts name: the replay checkpoint is damaged"
            )
        first = shapes[0][0]
        if not first or any(not shape or shape[0] != first[0] for shape, _ in shapes):
            raise Damaged(
                f"{file}: the columns of layout {n} differ in their number of steps: the replay checkpoint is damaged"
            )
        rows.append(first[0])
    for name, saved in record["tables"].items():
        for i, (_, _, _, steps) in enumerate(saved["items"]):
            for number, row in steps:
                if row >= rows[number]:
                    raise Damaged(
                        f"{os.path.join(path, 'tables.json')}: tables.{name}.items[{i}] names step "
                        f"{row} of layout {number}, which holds {rows[number]}: the replay checkpoint is "
                        "damaged"
                    )


def _header(file: str, headers: dict[str, tuple], name: str) -> tuple | None:
    """Column ``name``'s shape and dtype: its array's, or those its frames and indices make."""
    if name in headers or f"{name}_frames" not in headers or f"{name}_index" not in headers:
        return headers.get(name)
    (frames, frames_dtype), (index, index_dtype) = headers[f"{name}_frames"], headers[f"{name}_index"]
    if len(frames) != 3 or frames_dtype != np.uint8 or not len(index) or index_dtype.kind not in "iu":
        raise Damaged(
            f"{file}: {name}_frames must be [count, height, width] uint8 and {name}_index integers with the steps "
            "on their leading axis: the replay checkpoint is damaged"
        )
    return (*index, *frames[1:]), frames_dtype


def _complete(path: str) -> None:
    missing = [name for name in FILES if not os.path.isfile(os.path.join(path, name))]
    if missing:
        raise Damaged(
            f"{path} lacks {', '.join(missing)}: the replay checkpoint is incomplete (its writing never "
            "finished, or a file was removed)"
        )


def _expect(file: str, where: str, ok: Any, what: str, got: Any) -> None:
    if not ok:
        text = json.dumps(got)
        raise Damaged(
            f"{file}: {where} must be {what}, got {text if len(text) <= 60 else text[:57] + '...'}: "
            "the replay checkpoint is damaged"
        )


def _int(value: Any, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0


def _rng_state(state: Any) -> bool:
    try:
        np.random.default_rng().bit_generator.state = state
    except Exception:  # noqa: BLE001 -- numpy raises TypeError, ValueError, KeyError
        return False
    return True


def _reason(e: BaseException) -> str:
    text = str(e).splitlines()[0] if str(e) else ""
    return f"{type(e).__name__}: {text[:120]}" if text else type(e).__name__


__all__ = ["Damaged", "array_headers", "check_checkpoint", "read_checkpoint", "read_record"]
