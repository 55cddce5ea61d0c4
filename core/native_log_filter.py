"""Keeping native libraries' log lines off a user's terminal (``shoal train`` without ``--verbose``).

Reverb's C++ code writes its informational lines (``[reverb/cc/...] Started replay server ...``)
straight to file descriptor 2, beyond the reach of Python's ``logging``; TensorFlow's C++ code
writes ``2026-01-01 12:00:00.000000: W external/...`` lines the same way, and Ray's driver one
``core_worker.cc`` note per restartable node (``RAY_NOTICE``). ``drop_native_log_lines``
points fd 2 at a pipe and forwards every line except those to the real stderr, from a thread;
at exit it puts the real stderr back and forwards what is left, so no line of Shoal's own (its
final error line included) is lost or reordered. ``shoal train`` filters unless ``--verbose``
(``keep_native_log_lines``); a run made from Python with ``run_experiment`` on Reverb (whose
server and samplers live in the calling process) filters while it runs (``native_log_lines_dropped``).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import sys
import threading
from collections.abc import Iterator

# Ray's driver notes of every restartable node that its constructor's arguments are in the object
# store (they are: a node is over 100 KB pickled); they stay there while the driver lives, which
# is the run's life (Ray's issue 53727).
RAY_NOTICE = (
    rb"\[[\d\- :,]+ E \d+ \d+\] core_worker\.cc:\d+: Actor \S+ with class name: '_NodeActor' and ID: "
    rb"'\w+' has constructor arguments in the object store and max_restarts > 0"
)
NATIVE_LOG_LINE = re.compile(rb"^(\[reverb/cc/|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IW] |" + RAY_NOTICE + rb")")


def drop_native_log_lines() -> None:
    """From now on, fd 2 of this process (and of processes it starts) drops native info/warning
    log lines; Python's ``sys.stderr`` and everything else pass through unchanged. Once: a
    second call while the filter is in place does nothing."""
    if _restores:
        return
    sys.stderr.flush()
    real_stderr = os.dup(2)
    read_end, write_end = os.pipe()
    os.dup2(write_end, 2)
    os.close(write_end)

    def forward() -> None:
        with os.fdopen(read_end, "rb", buffering=0) as pipe:
            pending = b""
            while chunk := pipe.read(65536):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                kept = b"".join(line + b"\n" for line in lines if not NATIVE_LOG_LINE.match(line))
                if kept:
                    os.write(real_stderr, kept)
            if pending and not NATIVE_LOG_LINE.match(pending):
                os.write(real_stderr, pending)

    thread = threading.Thread(target=forward, name="stderr-filter", daemon=True)
    thread.start()

    def restore() -> None:
        sys.stderr.flush()
        os.dup2(real_stderr, 2)  # the pipe's write end closes here (unless a child still holds it)
        thread.join(timeout=2.0)

    _restores.append(restore)
    atexit.register(restore_stderr)


_restores: list = []
_kept: list[bool] = []  # (keep_native_log_lines was called)


def keep_native_log_lines() -> None:
    """From now on ``native_log_lines_dropped`` filters nothing (``shoal train --verbose``)."""
    _kept.append(True)


@contextlib.contextmanager
def native_log_lines_dropped() -> Iterator[None]:
    """``drop_native_log_lines`` for the block, the real stderr back at its end (with every line
    forwarded); nothing if a filter is already in place or ``keep_native_log_lines`` was called."""
    if _restores or _kept:
        yield
        return
    drop_native_log_lines()
    try:
        yield
    finally:
        restore_stderr()


def restore_stderr() -> None:
    """Puts the real stderr back and forwards what the filter still holds (once; also at exit)."""
    while _restores:
        _restores.pop()()
