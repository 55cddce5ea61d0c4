"""Loggers: each ``write(values)`` one row of named scalars.

* ``TerminalLogger`` prints a compact line, at most every ``time_delta`` seconds.
* ``CSVLogger`` appends rows to ``<run_dir>/<label>.csv`` (across restarts; a new column widens
  the header, missing values are left blank).
* ``TensorBoardLogger`` writes scalars with tensorboardX under ``<run_dir>/tb/<label>``.
* ``Dispatcher`` fans one row out to several loggers.
"""

from __future__ import annotations

import csv
import io
import math
import numbers
import os
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

from shoal.core.files import open_append, write_atomic


def _format(value: Any) -> str:
    if isinstance(value, float) and value != value:  # (NaN: nothing measured yet, e.g. no evaluation)
        return "-"
    if isinstance(value, float):
        return f"{value:,.4g}" if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


class Logger:
    def write(self, values: Mapping[str, Any]) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass


class TerminalLogger(Logger):
    """Prints ``[label] key value | key value ...``, rate-limited to one line per ``time_delta`` s."""

    def __init__(self, label: str, time_delta: float = 0.0, stream: TextIO | None = None) -> None:
        self._label = label
        self._time_delta = time_delta
        self._stream = stream or sys.stderr
        self._last = -float("inf")

    def write(self, values: Mapping[str, Any]) -> None:
        now = time.monotonic()
        if now - self._last < self._time_delta:
            return
        self._last = now
        line = " | ".join(f"{k} {_format(v)}" for k, v in values.items())
        print(f"[{self._label}] {line}", file=self._stream, flush=True)


def _open_read(path: str) -> TextIO:
    return os.fdopen(os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC), newline="")


class CSVLogger(Logger):
    """Rows of ``<run_dir>/<label>.csv``, appended to what an earlier process of the same node
    (a restart, a resumed run) wrote. A row with a column the file does not have yet rewrites
    the file once with the wider header (rows without it leave it blank), so no value is lost."""

    def __init__(self, run_dir: str, label: str) -> None:
        os.makedirs(run_dir, exist_ok=True)
        self.path = os.path.join(run_dir, f"{label}.csv")
        self._fields: list[str] = []
        if os.path.exists(self.path) and os.path.getsize(self.path):
            with _open_read(self.path) as f:
                self._fields = next(csv.reader(f), [])
        self._file = open_append(self.path)  # (never through a link planted in the run directory)

    def write(self, values: Mapping[str, Any]) -> None:
        new = [key for key in values if key not in self._fields]
        if new:
            self._widen(new)
        csv.DictWriter(self._file, fieldnames=self._fields).writerow(dict(values))
        self._file.flush()

    def _widen(self, new: list[str]) -> None:
        self._file.close()
        with _open_read(self.path) as f:
            rows = list(csv.DictReader(f)) if self._fields else []
        self._fields = self._fields + new
        text = io.StringIO(newline="")
        writer = csv.DictWriter(text, fieldnames=self._fields)
        writer.writeheader()
        writer.writerows(rows)
        write_atomic(self.path, text.getvalue())
        self._file = open_append(self.path)

    def close(self) -> None:
        self._file.close()


class TensorBoardLogger(Logger):
    """Scalars to TensorBoard; the x axis is ``values[step_key]`` (or a row counter).

    What TensorBoard cannot hold is skipped, never raised: values that are not finite real
    numbers (NaN placeholders, e.g. no evaluation yet, strings, ints beyond a float), and whole
    rows whose step is not a finite number that fits TensorBoard's int64 step."""

    def __init__(self, run_dir: str, label: str, step_key: str = "env_steps") -> None:
        self.path = os.path.join(run_dir, "tb", label)
        self._writer: Any = None  # (made at the first scalar: tensorboardX's import stays off a run's start)
        self._step_key = step_key
        self._rows = 0

    def _events(self) -> Any:
        if self._writer is None:
            from tensorboardX import SummaryWriter  # lazy: tensorboardX (protobuf), after the first env step

            self._writer = SummaryWriter(self.path, flush_secs=5)
        return self._writer

    def write(self, values: Mapping[str, Any]) -> None:
        step = values.get(self._step_key, self._rows)
        self._rows += 1
        if isinstance(step, numbers.Integral) and not isinstance(step, bool):
            step = int(step)  # (exact: no detour through a float)
        elif self._scalar(step) is not None:
            step = int(step)
        if not isinstance(step, int) or isinstance(step, bool) or not -(2**63) <= step < 2**63:
            return
        for key, value in values.items():
            scalar = self._scalar(value)
            if scalar is not None:
                self._events().add_scalar(key, scalar, step)

    @staticmethod
    def _scalar(value: Any) -> float | None:
        """``value`` as a finite float, or ``None`` (not a real number, NaN, inf, beyond a float)."""
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            return None
        try:
            number = float(value)
        except (OverflowError, TypeError, ValueError):
            return None
        return number if math.isfinite(number) else None

    def close(self) -> None:
        if self._writer is None:
            return
        try:
            self._writer.close()
        except OSError:  # e.g. a full disk: tensorboardX would keep its flush thread and retry at exit
            for writer in self._writer.all_writers.values():
                events = writer.event_writer
                if events._worker is not None:
                    events._worker.stop()
                events._closed = True
            raise


class Dispatcher(Logger):
    """Fans each row out to ``loggers``. A logger that raises does not stop the row reaching the
    others, nor the node: the first failure of each logger is one warning line on stderr naming
    the logger and the error (later ones are not repeated), and the logger is tried again with
    the next row (a full disk may clear)."""

    def __init__(self, loggers: Sequence[Logger]) -> None:
        self._loggers = list(loggers)
        self._warned: set[int] = set()

    def write(self, values: Mapping[str, Any]) -> None:
        for index, logger in enumerate(self._loggers):
            try:
                logger.write(values)
            except Exception as e:  # noqa: BLE001 -- a log is not worth a node
                if index not in self._warned:
                    self._warned.add(index)
                    where = getattr(logger, "path", None)
                    name = type(logger).__name__ + (f" ({where})" if where else "")
                    print(
                        f"shoal: warning: {name} could not write a row: {type(e).__name__}: {e!s:.200}; "
                        "the other logs go on (further failures of this logger are not reported)",
                        file=sys.stderr,
                        flush=True,
                    )

    def close(self) -> None:
        """Closes every logger, even when one fails (the first failure is raised after)."""
        failure = None
        for logger in self._loggers:
            try:
                logger.close()
            except Exception as e:  # noqa: BLE001
                failure = failure or e
        if failure is not None:
            raise failure


class NoOpLogger(Logger):
    def write(self, values: Mapping[str, Any]) -> None:
        pass


def make_logger(
    label: str, run_dir: str | None = None, terminal: bool = True, time_delta: float = 1.0, step_key: str = "env_steps"
) -> Logger:
    """The standard logger of a Shoal node: terminal line + CSV + TensorBoard (if ``run_dir``)."""
    loggers: list[Logger] = []
    if terminal:
        loggers.append(TerminalLogger(label, time_delta))
    if run_dir:
        loggers.append(CSVLogger(run_dir, label))
        loggers.append(TensorBoardLogger(run_dir, label, step_key))
    return Dispatcher(loggers)
