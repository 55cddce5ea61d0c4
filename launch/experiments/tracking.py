"""``RunTracker``: a run's logs sent to a tracking backend (``--track wandb|mlflow``;
``trackers``) by the process that launched the run, whichever launcher runs its nodes.

The nodes write their CSV logs to the run directory as always (``train``, ``learner``, ``eval``,
``actor_N``, and a distributed run's driver's ``program``: the actors running; every metric, the
time breakdown's ``time_*`` columns included); a thread of the launching process reads what
each log gained every ``every_s`` seconds (``CsvTail``) and hands those rows to the backend,
with each new evaluation video. At the run's end it sends the rest and the result. The tracking
run's id and how many rows of each log it holds are kept in ``<run_dir>/tracking.json``, so a
resumed run continues the same tracking run where it left off.

The backend never stops training: its first failure is one warning line and tracking ends
there, while the CSV and TensorBoard logs go on complete. Nor does it hold the run's end: the
run waits for it at most ``FINISH_TIMEOUT_S`` (``STOPPED_GRACE_S`` after a run stopped by a
signal), and a signal while it waits ends the wait at once (``RunTracker.close``).
"""

from __future__ import annotations

import csv
import glob
import math
import os
import re
import sys
import threading
import time
from typing import Any

from shoal.launch.experiments.run_directory.config_record import flat_record
from shoal.launch.experiments.run_directory.directory import read_json, write_json
from shoal.launch.experiments.trackers import BACKENDS

STATE = "tracking.json"
FINISH_TIMEOUT_S = 30.0  # the longest a run's end waits for its tracker
STOPPED_GRACE_S = 5.0  # ... after a run stopped by a signal (Ctrl-C, SIGTERM)
_VIDEO = re.compile(r"eval-(\d+)\.mp4$")


class CsvTail:
    """The rows one CSV log gained since the last ``read``, as numbers (blank, NaN and
    non-numeric values left out). ``rows``: how many were read before (a resumed run's count).
    A log rewritten with a wider header (``loggers.CSVLogger``) is read again from its start,
    skipping the rows already read."""

    def __init__(self, path: str, rows: int = 0) -> None:
        self.path, self.rows = path, rows
        self._inode: int | None = None
        self._header_line = b""
        self._offset = 0
        self._header: list[str] = []

    def read(self) -> list[dict[str, float]]:
        try:
            f = open(self.path, "rb")  # noqa: SIM115 -- opened once, used in the with below
        except FileNotFoundError:
            return []
        with f:  # (one open file: a rewrite between a look at the path and the read cannot mislead it)
            stat, header = os.fstat(f.fileno()), f.readline()
            if not header.endswith(b"\n"):
                return []
            skip = 0
            # New, or rewritten (wider): a new file (its inode number may be an earlier one's, reused),
            # so its header and size are compared too.
            if (stat.st_ino, header) != (self._inode, self._header_line) or stat.st_size < self._offset:
                self._inode, self._header_line, skip = stat.st_ino, header, self.rows
                self._header, self._offset = next(csv.reader([header.decode("utf-8", "replace")])), len(header)
            f.seek(self._offset)
            data = f.read()
        data = data[: data.rfind(b"\n") + 1]  # (whole lines only: a row may be half-written)
        self._offset += len(data)
        rows = [self._numbers(values) for values in csv.reader(data.decode("utf-8", "replace").splitlines())][skip:]
        self.rows += len(rows)
        return rows

    def _numbers(self, values: list[str]) -> dict[str, float]:
        row: dict[str, float] = {}
        for key, text in zip(self._header, values):
            try:
                number = float(text)
            except ValueError:
                continue
            if math.isfinite(number):
                row[key] = int(number) if key.endswith("_steps") else number
        return row


class RunTracker:
    """Sends ``run_dir``'s logs to the ``backend`` (a ``trackers`` name) from a thread of this
    process, from ``start()`` to ``close(result)``."""

    def __init__(self, backend: str, run_dir: str, resume: bool, every_s: float = 5.0) -> None:
        self._name, self._run_dir, self._every_s = backend, run_dir, every_s
        saved: Any = _saved_state(os.path.join(run_dir, STATE)) if resume else None  # (a dict where same)
        same = isinstance(saved, dict) and saved.get("backend") == backend
        self._resume_id = saved.get("run_id") if same else None
        self._rows: dict[str, int] = dict(saved.get("rows") or {}) if same else {}
        self._videos: list[str] = list(saved.get("videos") or []) if same else []
        self._tails: dict[str, CsvTail] = {}
        self._written: dict[str, Any] | None = None  # (tracking.json as last written)
        self._result: dict[str, Any] | None = None
        self._closing = threading.Event()
        self._done = threading.Event()  # (set when the thread ends, however it ends)
        self._thread = threading.Thread(target=self._follow, name="shoal-tracking", daemon=True)

    def start(self) -> RunTracker:
        self._thread.start()
        return self

    def close(
        self, result: dict[str, Any] | None, stop: threading.Event | None = None, timeout_s: float = FINISH_TIMEOUT_S
    ) -> None:
        """Sends what is left and ``result`` (``None``: the run failed), waiting at most
        ``timeout_s``, and no longer than a signal allows: ``stop`` is the run's stop request
        (``interrupts.StopRequest``, or any ``threading.Event``). If it is set already (the run
        was stopped by a signal) the wait is at most ``STOPPED_GRACE_S`` and a second signal
        (``stop.hurry``) ends it; if not, setting it ends the wait. A tracker left behind (its
        thread is a daemon) costs one warning line; the CSV logs are complete either way."""
        self._result = result
        self._closing.set()
        stopped = stop is not None and stop.is_set()
        interrupt = getattr(stop, "hurry", None) if stopped else stop
        bound_s = min(timeout_s, STOPPED_GRACE_S) if stopped else timeout_s
        deadline = time.monotonic() + bound_s
        while not self._done.wait(0.05):  # (a signal sets an event; none can wake another's wait)
            if interrupt is not None and interrupt.is_set():
                why = "the run was interrupted while it waited"
            elif time.monotonic() >= deadline:
                why = f"it did not finish within {bound_s:g} s"
            else:
                continue
            print(
                f"shoal: warning: tracking ({self._name}) left unfinished ({why}); the run's logs are "
                f"complete in {self._run_dir}",
                file=sys.stderr,
                flush=True,
            )
            return

    def _follow(self) -> None:
        try:
            self._track()
        finally:
            self._done.set()

    def _track(self) -> None:
        backend = BACKENDS[self._name]()
        self._closing.wait(self._every_s)  # (the backend starts after the run's own start, not beside it)
        try:
            # (the tracker's config is the flat layout, one key per setting, as it was before
            # config.json grouped them: a dashboard's filters and columns stay the same)
            config = flat_record(read_json(os.path.join(self._run_dir, "config.json"), "the run's config") or {})
            run_id = backend.start(self._run_dir, config, self._resume_id)
            print(f"shoal: tracking to {backend.where()}", file=sys.stderr, flush=True)
            while not self._closing.wait(self._every_s):
                self._send(backend, run_id)
            self._send(backend, run_id)
            backend.finish(self._result)
        except Exception as e:  # noqa: BLE001 -- a tracker never stops training
            print(
                f"shoal: warning: tracking ({self._name}) failed: {type(e).__name__}: {e!s:.300}; training "
                f"goes on, its CSV and TensorBoard logs stay complete in {self._run_dir} (no more "
                "tracking this run)",
                file=sys.stderr,
                flush=True,
            )

    def _send(self, backend, run_id: str) -> None:
        """What each log gained and the new videos; then ``tracking.json``."""
        for path in sorted(glob.glob(os.path.join(glob.escape(self._run_dir), "*.csv"))):
            label = os.path.basename(path)[:-4]
            tail = self._tails.setdefault(label, CsvTail(path, self._rows.get(label, 0)))
            rows = tail.read()
            if rows:
                backend.log(label, rows)
                self._rows[label] = tail.rows
        for path in sorted(glob.glob(os.path.join(glob.escape(self._run_dir), "videos", "eval-*.mp4"))):
            name = os.path.basename(path)
            match = _VIDEO.fullmatch(name)
            if match and name not in self._videos:
                backend.video(path, int(match.group(1)))
                self._videos.append(name)
        state = {"backend": self._name, "run_id": run_id, "rows": dict(self._rows), "videos": list(self._videos)}
        if state != self._written:
            write_json(os.path.join(self._run_dir, STATE), state)
            self._written = state


def start_tracking(config) -> RunTracker | None:
    """The tracker of ``config`` (an ``ExperimentConfig`` whose run directory is claimed),
    started; ``None`` without ``config.tracking.tracker``."""
    if not config.tracking.tracker or not config.run.dir:
        return None
    return RunTracker(config.tracking.tracker, config.run.dir, resume=config.run.resume).start()


def _saved_state(path: str) -> dict[str, Any] | None:
    """``tracking.json`` as ``RunTracker`` writes it (``None`` if there is none); one
    ``ValueError`` naming the file and the field that is not."""
    saved = read_json(path, "the run's tracking state")
    if saved is None:
        return None
    fields: dict[str, type | tuple[type, ...]] = {
        "backend": str,
        "run_id": (str, type(None)),
        "rows": dict,
        "videos": list,
    }
    bad = None if isinstance(saved, dict) else "the state"
    for key, kind in fields.items() if bad is None else ():
        if key in saved and not isinstance(saved[key], kind):
            bad = key
    if bad is None and any(
        not isinstance(n, int) or isinstance(n, bool) or n < 0 for n in saved.get("rows", {}).values()
    ):
        bad = "rows"
    if bad is None and not all(isinstance(v, str) for v in saved.get("videos", [])):
        bad = "videos"
    if bad is not None:
        raise ValueError(
            f"{path}: {bad} is not as Shoal writes it (got {saved if bad == 'the state' else saved[bad]!r:.80}); "
            "remove the file to track the resumed run as a new one"
        )
    return saved
