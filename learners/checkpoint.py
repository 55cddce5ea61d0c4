"""Checkpoints: a saveable's full state (params, optimizer state, counters, RNG) in one file.

The state pytree is serialized with ``flax.serialization`` (msgpack, no pickle) and restored
into the structure of a template, so a restarted learner resumes exactly where it stopped.
"""

from __future__ import annotations

import os
import tempfile

from flax import serialization

from shoal.core.interfaces import Saveable


def save_checkpoint(saveable: Saveable, path: str) -> str:
    """Writes ``saveable.save()`` to ``path`` atomically (write to a temp file, then rename)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    data = serialization.to_bytes(saveable.save())
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), suffix=".tmp")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
    return path


def restore_checkpoint(saveable: Saveable, path: str) -> None:
    """Restores ``saveable`` from ``path``; the current state serves as the structure template."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"no checkpoint at {path}")
    with open(path, "rb") as f:
        state = serialization.from_bytes(saveable.save(), f.read())
    saveable.restore(state)
