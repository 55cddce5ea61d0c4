"""A run's directory, owned by one live run at a time, and the JSON files in it.

``RunDirectory(path).lock()`` takes an exclusive ``flock`` on ``<path>/.lock``: a second live run
on the same directory is refused with one clear error (naming the owner's pid); the operating
system releases the lock when the owning process dies however it dies, so a stale lock from a
dead run is simply taken over. A directory that cannot be made or written is refused with one
line too. JSON files are written atomically (a temp file, then a rename), and a damaged one is
reported by name.
"""

from __future__ import annotations

import fcntl
import json
import os
from typing import Any


class RunDirectory:
    def __init__(self, path: str) -> None:
        self.path = path
        self._lock_fd: int | None = None

    def lock(self) -> "RunDirectory":
        try:
            os.makedirs(self.path, exist_ok=True)
            fd = os.open(os.path.join(self.path, ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise ValueError(f"cannot use {self.path!r} as a run directory: {e.strerror or e} "
                             "(choose another --run-dir)") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = os.read(fd, 32).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise ValueError(f"run directory {self.path!r} is in use by another run (pid {owner}); "
                             "choose another --run-dir, or wait for that run to end") from None
        try:
            os.ftruncate(fd, 0)
            os.write(fd, str(os.getpid()).encode())
        except OSError as e:  # e.g. a read-only mount that let us open the lock file
            os.close(fd)
            raise ValueError(f"cannot write to the run directory {self.path!r}: {e.strerror or e} "
                             "(choose another --run-dir)") from None
        self._lock_fd = fd
        return self

    def unlock(self) -> None:
        if self._lock_fd is not None:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    def __enter__(self) -> "RunDirectory":
        return self

    def __exit__(self, *exc: object) -> None:
        self.unlock()

    def file(self, *parts: str) -> str:
        return os.path.join(self.path, *parts)

    def write_json(self, name: str, value: Any) -> None:
        write_json(self.file(name), value)


def write_json(path: str, value: Any) -> None:
    """Writes ``value`` to ``path`` atomically: readers see the old file or the new one."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(value, f, indent=2, default=str)
    os.replace(tmp, path)


def read_json(path: str, what: str) -> Any:
    """The JSON in ``path`` (``what`` it holds, for the error); ``None`` if there is no such
    file. A file that is not valid JSON, or cannot be read, raises ``ValueError`` naming it."""
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return None
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} ({what}) is damaged: {e.msg} at line {e.lineno}; it cannot be "
                         "read back (was the run killed while writing it?)") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"cannot read {path} ({what}): {getattr(e, 'strerror', None) or e}") from None
