"""A run's directory, owned by one live run at a time.

``RunDirectory(path).lock()`` takes an exclusive ``flock`` on ``<path>/.lock``: a second live run
on the same directory is refused with one clear error (naming the owner's pid); the operating
system releases the lock when the owning process dies however it dies, so a stale lock from a
dead run is simply taken over. JSON files are written atomically (a temp file, then a rename).
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
        os.makedirs(self.path, exist_ok=True)
        fd = os.open(os.path.join(self.path, ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = os.read(fd, 32).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise ValueError(f"run directory {self.path!r} is in use by another run (pid {owner}); "
                             "choose another --run-dir, or wait for that run to end") from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._lock_fd = fd
        return self

    def unlock(self) -> None:
        if self._lock_fd is not None:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    def file(self, *parts: str) -> str:
        return os.path.join(self.path, *parts)

    def write_json(self, name: str, value: Any) -> None:
        write_json(self.file(name), value)

    def read_json(self, name: str) -> Any:
        with open(self.file(name)) as f:
            return json.load(f)


def write_json(path: str, value: Any) -> None:
    """Writes ``value`` to ``path`` atomically: readers see the old file or the new one."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(value, f, indent=2, default=str)
    os.replace(tmp, path)
