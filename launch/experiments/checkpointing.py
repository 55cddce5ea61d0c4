"""Checkpoints of a run, in ``<run_dir>/checkpoints/``, so that ``--resume`` continues it.

* ``learner/`` -- the learner's full state (params, optimizer state, step counters, RNG, version)
  with orbax: each save is atomic, the last two are kept;
* ``replay/`` -- Reverb's own checkpoint of every table (the latest, written atomically by
  Reverb), restored by a replay server that starts on this directory;
* ``run.json`` -- written (atomically) last, so it always names a complete checkpoint: its env
  step and learner step, the run's counters, the replay item count, a digest of the learner
  state, and whatever the runner adds (evaluator schedule, actor position and RNG).

A crash between the writes leaves ``run.json`` naming the previous, complete checkpoint.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import time
from typing import Any

import jax
import numpy as np

from shoal.launch.experiments.rundir import write_json


def digest(tree: Any) -> str:
    """A SHA-256 of every leaf's dtype, shape and bytes: equal digests, bit-identical states."""
    h = hashlib.sha256()
    for leaf in jax.tree_util.tree_leaves(tree):
        leaf = np.asarray(leaf)
        h.update(f"{leaf.dtype}{leaf.shape}".encode())
        h.update(np.ascontiguousarray(leaf).tobytes())
    return h.hexdigest()[:16]


class Checkpointer:
    def __init__(self, run_dir: str, every_s: float = 300.0) -> None:
        import orbax.checkpoint as ocp  # (loaded only by runs that checkpoint)

        self._ocp = ocp
        self.directory = os.path.join(os.path.abspath(run_dir), "checkpoints")  # (orbax wants absolute paths)
        self.replay_directory = os.path.join(self.directory, "replay")
        self._manager = ocp.CheckpointManager(os.path.join(self.directory, "learner"),
                                              options=ocp.CheckpointManagerOptions(max_to_keep=2, create=True))
        self._every_s = every_s
        self._last = time.monotonic()

    def due(self) -> bool:
        return time.monotonic() - self._last >= self._every_s

    def save(self, env_steps: int, learner: Any, replay_client: Any | None = None,
             **state: Any) -> dict[str, Any]:
        """Checkpoints replay (if a client is given), then the learner, then ``run.json``
        (``state`` is stored in it as is: JSON values). Returns what ``run.json`` holds."""
        if replay_client is not None:  # (actors may insert meanwhile: the count is a range)
            before = _item_counts(replay_client)
            path = _checkpoint_replay(replay_client, self.replay_directory)
            after = _item_counts(replay_client)
            state["replay_checkpoint"] = os.path.basename(path.rstrip("/"))
            state["replay_items"] = after
            state["replay_items_range"] = {name: [min(before.get(name, n), n), max(before.get(name, n), n)]
                                           for name, n in after.items()}
        learner_state = jax.tree_util.tree_map(np.asarray, learner.save())
        step = max(env_steps, (self._manager.latest_step() or -1) + 1)  # steps must increase
        self._manager.save(step, args=self._ocp.args.StandardSave(learner_state))
        self._manager.wait_until_finished()
        run = {**state, "env_steps": int(env_steps), "learner_step": step,
               "learner_version": int(learner_state["version"]), "learner_digest": digest(learner_state),
               "saved_at": time.time()}
        write_json(os.path.join(self.directory, "run.json"), run)
        if replay_client is not None:
            keep_only_replay_checkpoint(self.directory, run["replay_checkpoint"])
        self._last = time.monotonic()
        return run


def _item_counts(replay_client: Any) -> dict[str, int]:
    return {name: int(info.current_size) for name, info in replay_client.server_info().items()}


def keep_only_replay_checkpoint(checkpoints: str, name: str | None) -> None:
    """Removes every Reverb checkpoint in ``checkpoints/replay`` but ``name`` (the one
    ``run.json`` names): older ones, and one a killed run wrote after its last ``run.json``
    (Reverb would load that one, the latest, on resume)."""
    directory = os.path.join(checkpoints, "replay")
    if name is None or not os.path.isdir(os.path.join(directory, name)):
        return
    for entry in os.listdir(directory):
        if entry != name and os.path.isdir(os.path.join(directory, entry)):
            shutil.rmtree(os.path.join(directory, entry), ignore_errors=True)


_DISK_ERRORS = {"No space left on device": errno.ENOSPC, "Disk quota exceeded": errno.EDQUOT,
                "File too large": errno.EFBIG}


def _checkpoint_replay(replay_client: Any, directory: str) -> str:
    """Reverb's checkpoint (returns its path); a full disk is raised as the ``OSError`` it is (Reverb raises it as
    an ``IndexError`` carrying the message)."""
    try:
        return replay_client.checkpoint()
    except Exception as e:  # noqa: BLE001
        for message, code in _DISK_ERRORS.items():
            if message in str(e):
                raise OSError(code, message, directory) from None
        raise


def read_run(run_dir: str) -> dict[str, Any] | None:
    """The ``run.json`` of ``run_dir``'s latest complete checkpoint, or ``None``."""
    import json

    try:
        with open(os.path.join(run_dir, "checkpoints", "run.json")) as f:
            return json.load(f)
    except FileNotFoundError:
        return None


def restore_learner(run_dir: str, learner: Any, run: dict[str, Any]) -> str:
    """Restores ``learner`` to the checkpoint ``run`` names; returns the restored state's digest."""
    import orbax.checkpoint as ocp

    manager = ocp.CheckpointManager(os.path.join(os.path.abspath(run_dir), "checkpoints", "learner"))
    template = jax.tree_util.tree_map(np.asarray, learner.save())
    restored = manager.restore(run["learner_step"], args=ocp.args.StandardRestore(template))
    learner.restore(restored)
    return digest(jax.tree_util.tree_map(np.asarray, learner.save()))
