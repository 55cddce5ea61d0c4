"""Ctrl-C (SIGINT) and SIGTERM in the ``shoal`` process, from its first instant to its exit.

A run goes through two phases, and a signal means what the phase allows:

* **setting up** (parsing, validation, imports, reading the environment's spec): nothing is
  written and no process started, so a signal ends ``shoal`` at once: the handler raises
  ``Interrupted``, ``main`` prints ``shoal: interrupted`` (or ``terminated``) and exits with
  130 (SIGINT) or 143 (SIGTERM). (Before even the CLI's modules import, ``shoal.__main__``
  leaves the same way.)
* **running** (a distributed run from the moment it claims its directory and starts its nodes;
  a one-process run from its first step: before it, nothing has been trained, and a signal
  unwinds the set-up as above, closing what it opened): the first signal asks the run to stop (``StopRequest`` set, ``reason`` the signal's name): the
  distributed driver takes a last checkpoint of the nodes that served, stops them in order and
  returns its result; the one-process runner stops at its next step. A second signal hurries
  the stop (``StopRequest.hurry``): every node is killed at once, and what they leave behind
  (shared-memory segments) is swept.

``install()`` is for the ``shoal`` executable only (it takes the process's signal handlers);
from Python, runners take a ``threading.Event`` as their ``stop``.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

from shoal.core.native_log_filter import restore_stderr

EXIT_CODES: dict[str | None, int] = {"SIGINT": 130, "SIGTERM": 143}  # (looked up with "terminated": or None)
LEAVE_AFTER_S = 1.0  # how long a set-up may take to unwind after a signal


class Interrupted(BaseException):
    """A signal while the run was still setting up (nothing written yet)."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.name]


class StopRequest(threading.Event):
    """A stop asked of a run: set by the first signal, ``reason`` its name; ``hurry`` is set by
    a second one (stop now: nothing more is saved or waited for)."""

    def __init__(self) -> None:
        super().__init__()
        self.reason = "SIGTERM"
        self.hurry = threading.Event()


_installed: _Handler | None = None


class _Handler:
    def __init__(self) -> None:
        self.stop = StopRequest()
        self.running = False
        self.taken: str | None = None  # (the signal that ended the set-up, once one did)

    def __call__(self, signum: int, frame: object) -> None:
        name = signal.Signals(signum).name
        if not self.running:
            # (an exception raised where Python ignores it -- e.g. inside a garbage-collector
            # callback of JAX's -- would be lost: if the process is still here after the grace,
            # it leaves anyway)
            threading.Thread(target=_leave_after, args=(name, LEAVE_AFTER_S), daemon=True).start()
            self.taken = name
            raise Interrupted(name)
        if self.stop.is_set():
            self.stop.hurry.set()
        else:
            self.stop.reason = name
            self.stop.set()


def _leave_after(name: str, grace_s: float) -> None:
    time.sleep(grace_s)

    restore_stderr()
    os.write(2, f"shoal: {'interrupted' if name == 'SIGINT' else 'terminated'}\n".encode())
    os._exit(EXIT_CODES[name])


def install() -> StopRequest:
    """Takes SIGINT and SIGTERM for this process (the ``shoal`` executable's main thread);
    returns the stop request the run is given."""
    global _installed
    _installed = _Handler()
    unraisable = sys.unraisablehook

    def quiet(info) -> None:  # (an Interrupted that Python ignored: _leave_after sees to it)
        if not isinstance(info.exc_value, Interrupted):
            unraisable(info)

    sys.unraisablehook = quiet
    for sig in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(sig) is not signal.SIG_IGN:  # (started with Ctrl-C ignored, e.g. nohup: kept so)
            signal.signal(sig, _installed)
    return _installed.stop


def taken_while_setting_up() -> str | None:
    """The signal that ended the set-up (``SIGINT``/``SIGTERM``), if one did. Where it arrived
    inside a native module's import, the import fails with another exception (a pybind11
    module's ``ImportError: initialization failed``) instead of ``Interrupted``: ``main``
    reads the signal here and leaves as ``Interrupted`` would."""
    return _installed.taken if _installed is not None else None


def run_begins() -> None:
    """From here a signal stops the run instead of ending the process (called by the runners;
    nothing happens where ``install`` was not called)."""
    if _installed is not None:
        _installed.running = True
