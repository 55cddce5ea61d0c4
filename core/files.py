"""Files Shoal writes in a run directory, never through a symbolic link.

A run directory is a trust boundary: whoever could plant a link in it (``R/.lock`` pointing at a
file of yours elsewhere) must not make a run write through it. So every file Shoal writes there
goes through one of these:

* ``write_atomic(path, data, mode)`` -- a fresh file with a random name in the same directory
  (``O_CREAT | O_EXCL | O_NOFOLLOW``, created with ``mode`` from the start: a secret is never
  readable by others, not even for an instant), then renamed over ``path``. A rename replaces a
  link at ``path`` with the file; it never writes where the link points. Readers see the old
  file or the new one.
* ``open_append(path)`` -- a log file opened for appending with ``O_NOFOLLOW``: a link at
  ``path`` is refused (``OSError`` ``ELOOP``), not followed.
* ``check_run_directory(path)`` -- the directory itself: refused (``ValueError``, one line) if
  another user owns it or anyone may write to it, if it is a link, or if anything in it is a link
  or belongs to another user (not looking inside ``wandb/``, Weights & Biases' own files with its
  own links, which Shoal never reads: ``--track wandb``); a group-writable directory is a warning
  (common under a private group's umask).

``O_NOFOLLOW`` guards the last part of a path only; ``check_run_directory`` covers the
directories inside the run directory (``logs/``, ``checkpoints/``, ...) before a run starts.
"""

from __future__ import annotations

import os
import secrets
import stat
import sys
from typing import IO

_NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC


def write_atomic(path: str, data: bytes | str, mode: int = 0o644) -> None:
    """Writes ``data`` to ``path`` through a fresh temp file and a rename (see the module doc)."""
    directory, name = os.path.split(path)
    tmp = os.path.join(directory, f".{name}.{secrets.token_hex(6)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def open_append(path: str, mode: int = 0o644, text: bool = True) -> IO:
    """``path`` opened for appending (created if missing); a symbolic link there is refused."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | _NOFOLLOW, mode)
    return os.fdopen(fd, "a" if text else "ab", **({"newline": ""} if text else {}))


def make_dirs(path: str) -> None:
    """``os.makedirs(path, exist_ok=True)``, refusing a path that exists as a link."""
    os.makedirs(path, exist_ok=True)
    if os.path.islink(path):
        raise ValueError(f"{path} is a symbolic link; Shoal does not write through links in a run "
                         "directory (remove it)")


def _who(uid: int) -> str:
    try:
        import pwd

        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (KeyError, ImportError):
        return f"uid {uid}"


def check_run_directory(path: str, max_entries: int = 100_000) -> None:
    """Refuses (``ValueError``, one line) a run directory others could subvert; see the module doc.
    A directory that does not exist yet passes (it will be made by this user), and so does one
    that cannot be reached (making it fails with the reason)."""
    try:
        top = os.lstat(path)
    except OSError:  # missing (made later by this user), or not reachable (making it will say why)
        return
    me = os.geteuid()
    if stat.S_ISLNK(top.st_mode):
        raise ValueError(f"run directory {path!r} is a symbolic link; give its real path as --run-dir")
    if not stat.S_ISDIR(top.st_mode):
        raise ValueError(f"run directory {path!r} exists and is not a directory (choose another --run-dir)")
    if top.st_uid != me:
        raise ValueError(f"run directory {path!r} belongs to {_who(top.st_uid)}, not to you ({_who(me)}): "
                         "another user could change what the run reads and writes (choose a directory of yours)")
    if top.st_mode & stat.S_IWOTH:
        raise ValueError(f"run directory {path!r} may be written by anyone (mode {stat.S_IMODE(top.st_mode):o}): "
                         f"another user could plant files in it; run chmod o-w {path} or choose another --run-dir")
    if top.st_mode & stat.S_IWGRP:
        print(f"shoal: warning: run directory {path} may be written by its group (mode "
              f"{stat.S_IMODE(top.st_mode):o}); everyone in that group can change what the run reads",
              file=sys.stderr, flush=True)
    seen = 0
    for root, dirs, files in os.walk(path):  # (os.walk does not descend into links)
        if root == path and "wandb" in dirs:  # (W&B's own files, links among them: Shoal reads none)
            dirs.remove("wandb")
            files = files + ["wandb"]
        for name in dirs + files:
            seen += 1
            if seen > max_entries:
                return
            entry = os.path.join(root, name)
            info = os.lstat(entry)
            if stat.S_ISLNK(info.st_mode):
                raise ValueError(f"{entry} is a symbolic link; Shoal does not read or write through links "
                                 "in a run directory (remove it, or choose another --run-dir)")
            if info.st_uid != me:
                raise ValueError(f"{entry} belongs to {_who(info.st_uid)}, not to you ({_who(me)}); "
                                 "remove it, or choose another --run-dir")
            if stat.S_ISDIR(info.st_mode) and info.st_mode & stat.S_IWOTH:
                raise ValueError(f"{entry} may be written by anyone (mode {stat.S_IMODE(info.st_mode):o}); "
                                 f"run chmod o-w {entry} or choose another --run-dir")
