"""A self-play run's snapshot pool in its run directory: ``checkpoints/self_play_pool-<learner
checkpoint step>.npz`` (arrays only; ``SnapshotPool.save``), written with each checkpoint by
whichever process holds the pool (one process's runner, a distributed run's learner node), named
in ``run.json`` (``self_play_pool``), and the only one kept once that ``run.json`` is committed.
(Named by the learner checkpoint's step, which increases from checkpoint to checkpoint where the
env steps may not: a pool never overwrites the one the committed ``run.json`` names.)"""

from __future__ import annotations

import os
from typing import Any

PREFIX, SUFFIX = "self_play_pool-", ".npz"


def save_pool(pool: Any, run_dir: str, written: dict[str, Any]) -> str:
    """Writes ``pool`` beside the checkpoint ``Checkpointer.save`` just ``written``; returns the
    file's name."""
    name = f"{PREFIX}{int(written['learner_step']):012d}{SUFFIX}"
    pool.save(os.path.join(run_dir, "checkpoints", name))
    return name


def keep_only_pool(run_dir: str, name: str) -> None:
    """Removes the pools of earlier checkpoints (``run.json`` names ``name`` now)."""
    directory = os.path.join(run_dir, "checkpoints")
    for other in os.listdir(directory):
        if other.startswith(PREFIX) and other.endswith(SUFFIX) and other != name:
            os.remove(os.path.join(directory, other))


def pool_path(run_dir: str, saved: dict[str, Any]) -> str | None:
    """The pool file ``saved`` (a ``run.json``) names, or ``None``."""
    name = saved.get("self_play_pool")
    return os.path.join(run_dir, "checkpoints", os.path.basename(name)) if name else None


def restore_pool(pool: Any, run_dir: str, saved: dict[str, Any], like: Any) -> bool:
    """Restores the pool ``saved`` (a ``run.json``) names into ``pool`` (``like``: parameters of
    the run's structure); returns whether it named one (a checkpoint of a run without self-play
    names none)."""
    path = pool_path(run_dir, saved)
    if path is None:
        return False
    pool.restore(path, like)
    return True
