"""Files Shoal writes, in a run directory or anywhere else, never through a symbolic link, and
the one way it writes JSON.

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
  (common under a private group's umask), and refused for a resume (``resume=True``), which
  reads the code names and the checkpoints it continues from the directory. A directory with
  more than ``MAX_ENTRIES`` entries is refused: a check that cannot finish does not pass.

``O_NOFOLLOW`` guards the last part of a path only; ``check_run_directory`` covers the
directories inside the run directory (``logs/``, ``checkpoints/``, ...) before a run starts.

Outside a run directory (``shoal compare``'s table, summary and plots, a benchmark's results),
``write_output(path, data)`` writes as ``write_atomic`` does, and refuses a link at ``path``
outright (one line; the link and its target untouched). Every JSON text Shoal writes, to a file
or to stdout, is ``json_text(value)``: strict JSON (RFC 8259), which has no NaN or Infinity --
a non-finite number is a ``ValueError`` naming where it is, never a file strict parsers refuse.
"""

from __future__ import annotations

import json
import math
import os
import pwd
import secrets
import stat
import sys
from typing import IO, Any

_NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC

# The most entries ``check_run_directory`` looks at; a directory holding more is refused.
MAX_ENTRIES = 100_000


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


def write_output(path: str, data: bytes | str) -> None:
    """Writes ``data`` to ``path``, a file Shoal makes outside a run directory (``shoal
    compare``'s outputs, a benchmark's results), as ``write_atomic`` does; a symbolic link at
    ``path`` is refused (``ValueError``, one line): neither it nor what it points to changes."""
    check_output(path)
    write_atomic(path, data)


def check_output(path: str) -> None:
    """Refuses (``ValueError``, one line) a symbolic link at ``path``, where Shoal is to write an
    output (``write_output``; a command checks all of its outputs before it writes the first)."""
    if os.path.islink(path):
        raise ValueError(
            f"{path} is a symbolic link; Shoal does not write through links (remove it, or write elsewhere)"
        )


def json_text(value: Any, what: str = "the JSON", indent: int | None = None) -> str:
    """``value`` as strict JSON (values JSON has no type for as their ``str``): a NaN or an
    infinity, which strict parsers refuse, raises ``ValueError`` naming ``what`` and where in
    ``value`` it is, instead of being written as ``NaN``/``Infinity``."""
    try:
        return json.dumps(value, indent=indent, default=str, allow_nan=False)
    except ValueError:
        where = _non_finite(value)
        if where is None:
            raise
        raise ValueError(f"{what} would hold {where}, which JSON cannot hold (a number must be finite)") from None


def _non_finite(value: Any, at: str = "") -> str | None:
    """``key.path = value`` of the first non-finite float in ``value`` (``None``: none)."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"{at or 'the value'} = {value}"
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, (list, tuple)) else ()
    for key, item in items:
        found = _non_finite(item, f"{at}.{key}" if at else str(key))
        if found:
            return found
    return None


def open_append(path: str, mode: int = 0o644, text: bool = True) -> IO:
    """``path`` opened for appending (created if missing); a symbolic link there is refused."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | _NOFOLLOW, mode)
    return os.fdopen(fd, "a", newline="") if text else os.fdopen(fd, "ab")


def make_dirs(path: str) -> None:
    """``os.makedirs(path, exist_ok=True)``, refusing a path that exists as a link."""
    os.makedirs(path, exist_ok=True)
    if os.path.islink(path):
        raise ValueError(
            f"{path} is a symbolic link; Shoal does not write through links in a run directory (remove it)"
        )


def _who(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (KeyError, ImportError):
        return f"uid {uid}"


def check_run_directory(
    path: str, max_entries: int | None = None, resume: bool = False, flag: str | None = "--run-dir"
) -> None:
    """Refuses (``ValueError``, one line) a run directory others could subvert; see the module doc.
    A directory that does not exist yet passes (it will be made by this user), and so does one
    that cannot be reached (making it fails with the reason). One with more than ``max_entries``
    entries (default ``MAX_ENTRIES``) is refused: what was not looked at is not passed.
    ``resume``: the directory of a run to resume, whose ``config.json`` names the code the resume
    runs: it, and every entry in it (file or directory), must be writable by this user alone (a
    group-writable one is refused, not warned). An entry that vanishes while it is looked at (a
    live run replaces its files: ``write_atomic``'s temp files, old checkpoints) is passed:
    nothing can be read through it. ``flag``: how the user gave ``path``, which a refusal
    suggests choosing another of (``None``: a reader of this one run, ``shoal status``, which
    suggests only what makes the directory pass)."""
    limit = MAX_ENTRIES if max_entries is None else max_entries
    other = f", or choose another {flag}" if flag else ""  # (what a refusal ends with)
    or_other = f" or choose another {flag}" if flag else ""
    try:
        top = os.lstat(path)
    except OSError:  # missing (made later by this user), or not reachable (making it will say why)
        return
    me = os.geteuid()
    if stat.S_ISLNK(top.st_mode):
        raise ValueError(
            f"run directory {path!r} is a symbolic link; give its real path" + (f" as {flag}" if flag else "")
        )
    if not stat.S_ISDIR(top.st_mode):
        raise ValueError(
            f"run directory {path!r} exists and is not a directory" + (f" (choose another {flag})" if flag else "")
        )
    if top.st_uid != me:
        raise ValueError(
            f"run directory {path!r} belongs to {_who(top.st_uid)}, not to you ({_who(me)}): "
            "another user could change what the run reads and writes"
            + (" (choose a directory of yours)" if flag else "")
        )
    if top.st_mode & stat.S_IWOTH:
        raise ValueError(
            f"run directory {path!r} may be written by anyone (mode {stat.S_IMODE(top.st_mode):o}): "
            f"another user could plant files in it; run chmod o-w {path}{or_other}"
        )
    if top.st_mode & stat.S_IWGRP and resume:
        raise ValueError(
            f"run directory {path!r} may be written by its group (mode {stat.S_IMODE(top.st_mode):o}): "
            f"a resume runs what its config.json names; run chmod -R g-w {path} to resume it"
        )
    if top.st_mode & stat.S_IWGRP:
        print(
            f"shoal: warning: run directory {path} may be written by its group (mode "
            f"{stat.S_IMODE(top.st_mode):o}); everyone in that group can change what the run reads",
            file=sys.stderr,
            flush=True,
        )
    seen = 0
    for root, dirs, files in os.walk(path):  # (os.walk does not descend into links)
        if root == path and "wandb" in dirs:  # (W&B's own files, links among them: Shoal reads none)
            dirs.remove("wandb")
            files = files + ["wandb"]
        for name in dirs + files:
            seen += 1
            if seen > limit:
                raise ValueError(
                    f"run directory {path!r} holds more than {limit:,} entries, more than Shoal "
                    f"checks before it uses one (for links and others' files); remove what is not the run's{other}"
                )
            entry = os.path.join(root, name)
            try:
                info = os.lstat(entry)
            except FileNotFoundError:  # (gone since the walk listed it: a live run's temp file, an old checkpoint)
                continue
            if stat.S_ISLNK(info.st_mode):
                raise ValueError(
                    f"{entry} is a symbolic link; Shoal does not read or write through links "
                    f"in a run directory (remove it{other})"
                )
            if info.st_uid != me:
                raise ValueError(f"{entry} belongs to {_who(info.st_uid)}, not to you ({_who(me)}); remove it{other}")
            if stat.S_ISDIR(info.st_mode) and info.st_mode & stat.S_IWOTH:
                raise ValueError(
                    f"{entry} may be written by anyone (mode {stat.S_IMODE(info.st_mode):o}); "
                    f"run chmod o-w {entry}{or_other}"
                )
            if resume and info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                raise ValueError(
                    f"{entry} may be written by {'anyone' if info.st_mode & stat.S_IWOTH else 'its group'} "
                    f"(mode {stat.S_IMODE(info.st_mode):o}): a resume restores what its run "
                    f"directory holds; run chmod -R go-w {path} to resume it"
                )
