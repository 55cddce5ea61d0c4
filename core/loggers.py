"""Loggers: each ``write(values)`` one row of named scalars.

* ``TerminalLogger`` prints a compact line, at most every ``time_delta`` seconds.
* ``CSVLogger`` appends rows to ``<run_dir>/<label>.csv`` (columns fixed by the first row;
  later keys that were not in it are dropped, missing ones left blank).
* ``TensorBoardLogger`` writes scalars with tensorboardX under ``<run_dir>/tb/<label>``.
* ``Dispatcher`` fans one row out to several loggers.
"""

from __future__ import annotations

import csv
import math
import os
import sys
import time
from typing import Any, Mapping, Sequence, TextIO


def _format(value: Any) -> str:
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


class CSVLogger(Logger):
    def __init__(self, run_dir: str, label: str) -> None:
        os.makedirs(run_dir, exist_ok=True)
        self.path = os.path.join(run_dir, f"{label}.csv")
        self._file = open(self.path, "w", newline="")
        self._writer: csv.DictWriter | None = None

    def write(self, values: Mapping[str, Any]) -> None:
        if self._writer is None:
            self._writer = csv.DictWriter(self._file, fieldnames=list(values), extrasaction="ignore")
            self._writer.writeheader()
        self._writer.writerow(dict(values))
        self._file.flush()

    def close(self) -> None:
        self._file.close()


class TensorBoardLogger(Logger):
    """Scalars to TensorBoard; the x axis is ``values[step_key]`` (or a row counter)."""

    def __init__(self, run_dir: str, label: str, step_key: str = "env_steps") -> None:
        from tensorboardX import SummaryWriter  # imported lazily: only runs with a run dir pay for it

        self._writer = SummaryWriter(os.path.join(run_dir, "tb", label), flush_secs=5)
        self._step_key = step_key
        self._rows = 0

    def write(self, values: Mapping[str, Any]) -> None:
        step = int(values.get(self._step_key, self._rows))
        self._rows += 1
        for key, value in values.items():  # (NaN placeholders, e.g. no evaluation yet, are skipped)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                self._writer.add_scalar(key, value, step)

    def close(self) -> None:
        self._writer.close()


class Dispatcher(Logger):
    def __init__(self, loggers: Sequence[Logger]) -> None:
        self._loggers = list(loggers)

    def write(self, values: Mapping[str, Any]) -> None:
        for logger in self._loggers:
            logger.write(values)

    def close(self) -> None:
        for logger in self._loggers:
            logger.close()


class NoOpLogger(Logger):
    def write(self, values: Mapping[str, Any]) -> None:
        pass


def make_logger(label: str, run_dir: str | None = None, terminal: bool = True,
                time_delta: float = 1.0, step_key: str = "env_steps") -> Logger:
    """The standard logger of a Shoal node: terminal line + CSV + TensorBoard (if ``run_dir``)."""
    loggers: list[Logger] = []
    if terminal:
        loggers.append(TerminalLogger(label, time_delta))
    if run_dir:
        loggers.append(CSVLogger(run_dir, label))
        loggers.append(TensorBoardLogger(run_dir, label, step_key))
    return Dispatcher(loggers)
