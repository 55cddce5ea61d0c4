"""Where a replay server's checkpoints are: what both backends restore from at start."""

from __future__ import annotations

import os


def latest_checkpoint(checkpoint_dir: str) -> str | None:
    """The checkpoint a server restores from ``checkpoint_dir``: the last, by name, of the
    subdirectories it finished writing (those holding ``DONE``, as Reverb's default checkpointer
    writes them and the native backend does too); else ``None``."""
    try:
        names = sorted(os.listdir(checkpoint_dir), reverse=True)
    except FileNotFoundError:
        return None
    for name in names:
        if os.path.exists(os.path.join(checkpoint_dir, name, "DONE")):
            return os.path.join(checkpoint_dir, name)
    return None
