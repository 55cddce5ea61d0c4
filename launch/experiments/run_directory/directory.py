"""A run's directory, owned by one live run at a time, and the JSON files in it.

``RunDirectory(path).lock()`` first checks the directory is this user's alone
(``shoal.core.files.check_run_directory``: not another user's, not writable by anyone, no
symbolic link in it), then takes an exclusive ``flock`` on the directory itself (not on a file
in it, which anyone able to delete files there could unlink from under a live run): a second
live run on the same directory is refused with one clear error (naming the owner's pid, which
``.lock`` records); the operating system releases the lock when the owning process dies however
it dies, so a stale lock from a dead run is simply taken over. A directory that cannot be made
or written is refused with one line too. ``lock(resume=True)`` (a resumed run) also refuses a
directory, or an entry in it, that its group may write. JSON files are written atomically and
never through a link (a temp file, then a rename), as strict JSON (no NaN or Infinity), and a
damaged one is reported by name.
"""

from __future__ import annotations

import fcntl
import json
import os
from typing import Any

from shoal.core.files import check_run_directory, json_text, write_atomic


class RunDirectory:
    def __init__(self, path: str) -> None:
        self.path = path
        self._lock_fd: int | None = None

    def lock(self, resume: bool = False) -> RunDirectory:
        """Checks the directory (``resume``: as a resumed run's, ``check_run_directory``), then
        takes it; ``ValueError`` (one line) if it is refused or another run holds it."""
        check_run_directory(self.path, resume=resume)
        try:
            os.makedirs(self.path, exist_ok=True)
            fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as e:
            raise ValueError(
                f"cannot use {self.path!r} as a run directory: {e.strerror or e} (choose another --run-dir)"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise ValueError(
                f"run directory {self.path!r} is in use by another run (pid {self.owner()}); "
                "choose another --run-dir, or wait for that run to end"
            ) from None
        try:
            check_run_directory(
                self.path, resume=resume
            )  # (again: what was checked could have changed before the lock)
            write_atomic(self.file(".lock"), str(os.getpid()))
        except OSError as e:  # e.g. a read-only mount
            os.close(fd)
            raise ValueError(
                f"cannot write to the run directory {self.path!r}: {e.strerror or e} (choose another --run-dir)"
            ) from None
        except BaseException:
            os.close(fd)
            raise
        self._lock_fd = fd
        return self

    def owner(self) -> str:
        """The pid of the run that holds (or last held) the directory: the holder of its
        ``flock`` as the system lists it (``/proc/locks``; so also after ``rm .lock``), else
        as ``.lock`` says, else ``?``."""
        holder = _flock_holder(self.path)
        if holder is not None:
            return str(holder)
        try:
            fd = os.open(self.file(".lock"), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return "?"
        with os.fdopen(fd, "rb") as f:
            return f.read(32).decode(errors="replace").strip() or "?"

    def unlock(self) -> None:
        if self._lock_fd is not None:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    def __enter__(self) -> RunDirectory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.unlock()

    def file(self, *parts: str) -> str:
        return os.path.join(self.path, *parts)

    def write_json(self, name: str, value: Any) -> None:
        write_json(self.file(name), value)


def _flock_holder(path: str) -> int | None:
    """The pid holding an ``flock`` on ``path`` (Linux's ``/proc/locks``: ``FLOCK ... WRITE pid
    major:minor:inode``); ``None`` if none is listed, or the system lists none."""
    try:
        st = os.stat(path)
        with open("/proc/locks") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    where = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    for line in lines:
        fields = line.split()
        if "->" in fields:  # (a waiter, not the holder)
            continue
        if (
            len(fields) >= 6
            and fields[1] == "FLOCK"
            and fields[5] == where
            and fields[4].isdigit()
            and int(fields[4]) > 0
        ):
            return int(fields[4])
    return None


def write_json(path: str, value: Any) -> None:
    """Writes ``value`` to ``path`` atomically, never through a link: readers see the old file
    or the new one. Strict JSON: a NaN or infinity in ``value`` is a ``ValueError`` naming it
    (``json_text``), and nothing is written."""
    write_atomic(path, json_text(value, path, indent=2))


def read_json(path: str, what: str) -> Any:
    """The JSON in ``path`` (``what`` it holds, for the error); ``None`` if there is no such
    file. A file that is not valid JSON, or cannot be read, raises ``ValueError`` naming it."""
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return None
    except json.JSONDecodeError as e:
        raise ValueError(
            f"{path} ({what}) is damaged: {e.msg} at line {e.lineno}; it cannot be "
            "read back (was the run killed while writing it?)"
        ) from None
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"cannot read {path} ({what}): {getattr(e, 'strerror', None) or e}") from None


def is_run_directory(directory: str) -> bool:
    """Whether ``directory`` is a Shoal run's (its ``config.json``, with the ``.lock`` a run
    writes or its ``checkpoints/``)."""
    return os.path.isfile(os.path.join(directory, "config.json")) and (
        os.path.isfile(os.path.join(directory, ".lock")) or os.path.isdir(os.path.join(directory, "checkpoints"))
    )
