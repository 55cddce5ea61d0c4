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
        if replay_client is not None:
            _checkpoint_replay(replay_client, os.path.join(self.directory, "replay"))
            state["replay_items"] = {name: int(info.current_size)
                                     for name, info in replay_client.server_info().items()}
        learner_state = jax.tree_util.tree_map(np.asarray, learner.save())
        step = max(env_steps, (self._manager.latest_step() or -1) + 1)  # steps must increase
        self._manager.save(step, args=self._ocp.args.StandardSave(learner_state))
        self._manager.wait_until_finished()
        run = {**state, "env_steps": int(env_steps), "learner_step": step,
               "learner_version": int(learner_state["version"]), "learner_digest": digest(learner_state),
               "saved_at": time.time()}
        write_json(os.path.join(self.directory, "run.json"), run)
        self._last = time.monotonic()
        return run


_DISK_ERRORS = {"No space left on device": errno.ENOSPC, "Disk quota exceeded": errno.EDQUOT,
                "File too large": errno.EFBIG}


def _checkpoint_replay(replay_client: Any, directory: str) -> None:
    """Reverb's checkpoint; a full disk is raised as the ``OSError`` it is (Reverb raises it as
    an ``IndexError`` carrying the message)."""
    try:
        replay_client.checkpoint()
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
