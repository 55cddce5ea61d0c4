"""The replay checkpoints of a run's ``checkpoints/`` (``checkpointing``'s bookkeeping of them).

``replay/`` holds the checkpoint ``run.json`` names, and while the next is written a newer one;
Reverb removes its older checkpoint as it writes a new one, so ``replay-kept/`` holds hard links
of the committed one meanwhile (no data copied), put back on resume if Reverb removed it.
"""

from __future__ import annotations

import os
import shutil
from typing import Any, TypeGuard

from shoal.launch.experiments.run_directory.directory import read_json

KEPT = "replay-kept"  # checkpoints/replay-kept/<name>/: hard links of the committed replay checkpoint


def keep_committed_replay(checkpoints: str) -> None:
    """Hard-links the files of the replay checkpoint ``run.json`` names into
    ``checkpoints/replay-kept/<name>/`` (no data is copied) before the next one is written:
    Reverb removes its older checkpoints when it writes a new one, and a run killed after that
    but before ``run.json`` names the new one must still find the one it names
    (``recover_committed_replay``). Removed once the next checkpoint is committed."""
    try:
        run = read_json(os.path.join(checkpoints, "run.json"), "the run's latest checkpoint")
    except ValueError:
        return
    name = run.get("replay_checkpoint") if isinstance(run, dict) else None
    if not _one_name(name):
        return
    source = os.path.join(checkpoints, "replay", name)
    if os.path.islink(source) or not os.path.isdir(source):
        return
    kept = os.path.join(checkpoints, KEPT, name)
    if os.path.isdir(kept):
        return
    shutil.rmtree(os.path.join(checkpoints, KEPT), ignore_errors=True)
    partial = kept + ".partial"
    os.makedirs(partial)
    for entry in os.scandir(source):
        if entry.is_file(follow_symlinks=False):
            os.link(entry.path, os.path.join(partial, entry.name), follow_symlinks=False)
    os.rename(partial, kept)


def _one_name(name: Any) -> TypeGuard[str]:
    """Whether ``name`` is one directory entry's name (no path)."""
    return isinstance(name, str) and name not in ("", ".", "..") and os.sep not in name and "\0" not in name


def recover_committed_replay(checkpoints: str, name: str | None) -> None:
    """Puts the replay checkpoint ``name`` (the one ``run.json`` names) back from
    ``replay-kept/`` if Reverb removed it from ``replay/`` (``keep_committed_replay``)."""
    if not _one_name(name):
        return
    target, kept = os.path.join(checkpoints, "replay", name), os.path.join(checkpoints, KEPT, name)
    if not os.path.isdir(target) and os.path.isdir(kept) and not os.path.islink(kept):
        os.makedirs(os.path.dirname(target), exist_ok=True)
        os.rename(kept, target)


def keep_only_replay_checkpoint(checkpoints: str, name: str | None) -> None:
    """Removes every Reverb checkpoint in ``checkpoints/replay`` but ``name`` (the one
    ``run.json`` names): older ones, and one a killed run wrote after its last ``run.json``
    (Reverb would load that one, the latest, on resume). Nothing is removed unless ``name`` is
    complete (its ``DONE`` written): a checkpoint goes only once a newer complete one exists."""
    directory = os.path.join(checkpoints, "replay")
    if not _one_name(name) or not os.path.isfile(os.path.join(directory, name, "DONE")):
        return
    for entry in os.listdir(directory):
        if entry != name and os.path.isdir(os.path.join(directory, entry)):
            shutil.rmtree(os.path.join(directory, entry), ignore_errors=True)
