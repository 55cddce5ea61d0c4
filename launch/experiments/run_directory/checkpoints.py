"""Checkpoints of a run, in ``<run_dir>/checkpoints/``, so that ``--resume`` continues it.

* ``learner/`` -- the learner's full state (params, optimizer state, step counters, RNG, version)
  with orbax: each save is atomic, the last two are kept;
* ``replay/`` -- Reverb's own checkpoint of every table (the latest, written atomically by
  Reverb), restored by a replay server that starts on this directory (``replay-kept/`` holds
  hard links of the committed one while the next is written: Reverb removes the older one);
* ``run.json`` -- written (atomically) last, so it always names a complete checkpoint: the env
  step, the learner step, version and state digest, the replay checkpoint and its item counts,
  the agent and the environment spec it was made for, the run's counters, the evaluator's
  schedule, and each actor's schedule position and RNG key.

A checkpoint is taken in two halves, by the same code in both runners: ``Checkpointer.save``
writes replay and the learner where the learner lives (the single-process runner, or the
learner node of a distributed run), and returns what it wrote; ``commit`` then writes
``run.json`` with the rest of the run's state (the runner, or the distributed driver, which
gathers it from the nodes). A crash between the writes leaves ``run.json`` naming the
previous, complete checkpoint.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import shutil
import time
from collections.abc import Iterator
from typing import Any, cast

import jax
import numpy as np

from shoal.core.specs import EnvironmentSpec, map_observation
from shoal.launch.experiments.run_directory.directory import read_json, write_json
from shoal.launch.experiments.run_directory.replay_checkpoints import (
    KEPT,
    keep_committed_replay,
    keep_only_replay_checkpoint,
)
from shoal.launch.experiments.run_directory.schemas import check_run
from shoal.launch.experiments.run_directory.self_play_pools import keep_only_pool, pool_path
from shoal.replay.backends import check_checkpoint_files


def orbax_checkpoint() -> Any:
    """``orbax.checkpoint``, imported by the runs that save or read a learner checkpoint only (0.2 s)."""
    import orbax.checkpoint as ocp  # lazy: orbax (0.2 s), only runs that checkpoint

    return ocp


def digest(tree: Any) -> str:
    """A SHA-256 of every leaf's dtype, shape and bytes: equal digests, bit-identical states."""
    h = hashlib.sha256()
    for leaf in jax.tree_util.tree_leaves(tree):
        leaf = np.asarray(leaf)
        h.update(f"{leaf.dtype}{leaf.shape}".encode())
        h.update(np.ascontiguousarray(leaf).tobytes())
    return h.hexdigest()[:16]


def spec_record(spec: EnvironmentSpec) -> dict[str, Any]:
    """What a checkpoint's networks were built for: observation and action shapes and dtypes (per
    key, for a Dict observation)."""
    record = lambda s: [list(s.shape), str(s.dtype)]  # noqa: E731
    observation = map_observation(record, spec.observation)
    return {
        "observation": observation,
        "action": [list(spec.action.shape), str(spec.action.dtype)],
        "num_actions": spec.num_actions,
    }


class Checkpointer:
    """Writes the learner's state (orbax) and Reverb's checkpoint of ``run_dir``'s run."""

    def __init__(self, run_dir: str) -> None:
        ocp = orbax_checkpoint()

        self._ocp = ocp
        self.directory = os.path.join(os.path.abspath(run_dir), "checkpoints")  # (orbax wants absolute paths)
        self.replay_directory = os.path.join(self.directory, "replay")
        self._manager = ocp.CheckpointManager(
            os.path.join(self.directory, "learner"), options=ocp.CheckpointManagerOptions(max_to_keep=2, create=True)
        )

    def save(self, env_steps: int, learner: Any, replay_client: Any | None = None) -> dict[str, Any]:
        """Checkpoints replay (if a client is given), then the learner; returns what ``commit``
        records of them."""
        written: dict[str, Any] = {}
        if replay_client is not None:  # (actors may insert meanwhile: the count is a range)
            before = _item_counts(replay_client)
            keep_committed_replay(self.directory)  # (Reverb removes it when it writes the next)
            path = _checkpoint_replay(replay_client, self.replay_directory)
            after = _item_counts(replay_client)
            written["replay_checkpoint"] = os.path.basename(path.rstrip("/"))
            written["replay_items"] = after
            written["replay_items_range"] = {
                name: [min(before.get(name, n), n), max(before.get(name, n), n)] for name, n in after.items()
            }
        learner_state = jax.tree_util.tree_map(np.asarray, learner.save())
        step = max(int(env_steps), (self._manager.latest_step() or -1) + 1)  # steps must increase
        self._manager.save(step, args=self._ocp.args.StandardSave(learner_state))
        self._manager.wait_until_finished()
        return {
            **written,
            "learner_step": step,
            "learner_version": int(learner_state["version"]),
            "learner_digest": digest(learner_state),
        }


def commit(run_dir: str, written: dict[str, Any], env_steps: int, **state: Any) -> dict[str, Any]:
    """Writes ``run.json`` (what ``Checkpointer.save`` ``written`` plus ``state``: JSON values),
    the last step of a checkpoint, and removes replay checkpoints and self-play pools it no
    longer names."""
    directory = os.path.join(run_dir, "checkpoints")
    run = {**state, **written, "env_steps": int(env_steps), "saved_at": time.time()}
    write_json(os.path.join(directory, "run.json"), run)
    if written.get("replay_checkpoint"):
        keep_only_replay_checkpoint(directory, written["replay_checkpoint"])
        shutil.rmtree(os.path.join(directory, KEPT), ignore_errors=True)  # (the new one is committed)
    if written.get("self_play_pool"):
        keep_only_pool(run_dir, written["self_play_pool"])
    return run


class Periodic:
    """``due()`` once every ``seconds`` (counted from creation, or the last ``reset()``)."""

    def __init__(self, seconds: float) -> None:
        self._seconds, self._last = seconds, time.monotonic()

    def due(self) -> bool:
        return time.monotonic() - self._last >= self._seconds

    def reset(self) -> None:
        self._last = time.monotonic()


def _item_counts(replay_client: Any) -> dict[str, int]:
    return {name: int(info.current_size) for name, info in replay_client.server_info().items()}


_DISK_ERRORS = {
    "No space left on device": errno.ENOSPC,
    "Disk quota exceeded": errno.EDQUOT,
    "File too large": errno.EFBIG,
}


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
    """The ``run.json`` of ``run_dir``'s latest complete checkpoint, or ``None``; one that does
    not fit its schema (``run_files.check_run``) raises a one-line ``ValueError``. (Checkpoints
    of earlier Shoal versions are read too: one actor's state under ``actor``, a distributed
    evaluator's schedule in ``evaluator.json``.)"""
    directory = os.path.join(run_dir, "checkpoints")
    run = read_json(os.path.join(directory, "run.json"), "the run's latest checkpoint")
    if run is None:
        return None
    if isinstance(run, dict) and "actors" not in run and "actor" in run:
        run["actors"] = {"actor": run.pop("actor")}
    if isinstance(run, dict) and "evaluator" not in run:
        run["evaluator"] = read_json(os.path.join(directory, "evaluator.json"), "the evaluator's schedule")
    check_run(os.path.join(directory, "run.json"), run)  # (its schema: one line, not a traceback later)
    return run


def check_spec(run_dir: str, run: dict[str, Any], spec: EnvironmentSpec, now_from: str, than: str) -> None:
    """Raises ``ValueError`` naming what differs if the checkpoint ``run`` names was made for
    observations or actions other than ``spec``'s (``now_from``: where ``spec`` comes from, in the
    diff; ``than``: the message's words for it); networks of the same shapes would otherwise load
    and read them wrongly."""
    saved, now = cast(dict[str, Any], run.get("spec")), spec_record(spec)
    if saved != now:  # (run.json's schema made it an object)
        diff = ", ".join(
            f"{key} {saved.get(key)} (checkpoint) vs {now.get(key)} ({now_from})"
            for key in now
            if saved.get(key) != now.get(key)
        )
        raise ValueError(f"the checkpoint in {run_dir} was made for another environment than {than}: {diff}")


def check_resumable(run_dir: str, run: dict[str, Any], agent: str, spec: EnvironmentSpec) -> None:
    """Raises ``ValueError`` saying what does not match if the checkpoint ``run`` names cannot
    continue ``agent`` on an environment of ``spec`` (e.g. an edited ``config.json``), or if a
    part of it is missing or cannot be read (the learner's state is read through once:
    ``check_learner_checkpoint``). Nothing is written before this passes."""
    if run.get("agent") != agent:
        raise ValueError(
            f"the checkpoint in {run_dir} is of agent {run['agent']!r}, but its config.json "
            f"names {agent!r}; resume it with its own config"
        )
    check_spec(run_dir, run, spec, "config.json", "config.json names")
    learner = os.path.join(run_dir, "checkpoints", "learner", str(run.get("learner_step")))
    if not os.path.isdir(learner):
        raise ValueError(
            f"{os.path.join(run_dir, 'checkpoints', 'run.json')} names learner checkpoint step "
            f"{run.get('learner_step')}, which is not in {os.path.dirname(learner)}; the "
            "checkpoint is incomplete and cannot be resumed"
        )
    pool = pool_path(run_dir, run)
    if pool and not os.path.isfile(pool):
        raise ValueError(
            f"{os.path.join(run_dir, 'checkpoints', 'run.json')} names self-play pool {os.path.basename(pool)!r}, "
            f"which is not in {os.path.dirname(pool)}; the checkpoint is incomplete and cannot be resumed"
        )
    replay = run.get("replay_checkpoint")
    if replay and not os.path.isdir(os.path.join(run_dir, "checkpoints", "replay", replay)):
        raise ValueError(
            f"{os.path.join(run_dir, 'checkpoints', 'run.json')} names replay checkpoint {replay!r}, "
            f"which is not in {os.path.join(run_dir, 'checkpoints', 'replay')}: the replay would start "
            "empty; the checkpoint is incomplete and cannot be resumed"
        )
    if replay:
        check_replay_checkpoint(run_dir, replay)
    check_learner_checkpoint(run_dir, run)


def check_replay_checkpoint(run_dir: str, name: str) -> None:
    """Raises ``ValueError`` (one line naming the file) unless the replay checkpoint ``name`` of
    ``run_dir`` is complete (its ``DONE`` written last, by Reverb and the native backend alike)
    and, for a native one, readable (``shoal.replay.backends.check_checkpoint_files``:
    its ``tables.json`` and the headers of ``steps.npz``). A replay server skips a checkpoint
    without ``DONE``, so the run would go on with an empty replay."""
    path = os.path.join(run_dir, "checkpoints", "replay", name)
    if not os.path.isfile(os.path.join(path, "DONE")):
        raise ValueError(
            f"{path} has no DONE file, so the replay checkpoint that "
            f"{os.path.join(run_dir, 'checkpoints', 'run.json')} names is incomplete and the replay "
            "would start empty; the run cannot be resumed from it: to start over, train into a new "
            "--run-dir"
        )

    check_checkpoint_files(path)


def check_learner_checkpoint(run_dir: str, run: dict[str, Any]) -> None:
    """Reads the learner checkpoint ``run`` names through (as host arrays, then dropped), so a
    damaged or foreign file is refused in one ``ValueError`` naming it before a resumed run
    writes anything or starts a node."""
    ocp = orbax_checkpoint()

    with _readable(run_dir, run):
        manager = ocp.CheckpointManager(os.path.join(os.path.abspath(run_dir), "checkpoints", "learner"))
        manager.restore(run["learner_step"], args=ocp.args.PyTreeRestore())


@contextlib.contextmanager
def _readable(run_dir: str, run: dict[str, Any]) -> Iterator[None]:
    """Turns a failure to read the learner checkpoint (tensorstore's multi-line dump, or a
    structure that does not fit the learner) into one line naming the file, or its step's
    directory."""
    try:
        yield
    except Exception as e:  # noqa: BLE001 -- orbax and tensorstore raise many kinds
        text = str(e)
        files = re.findall(r'local file "([^"]+)"', text)
        where = files[-1] if files else os.path.join(run_dir, "checkpoints", "learner", str(run["learner_step"]))
        code = re.match(r"[A-Z_]{4,}(?=:)", text)
        reason = code.group(0) if code else f"{type(e).__name__}: {text.splitlines()[0][:120] if text else ''}"
        raise ValueError(
            f"{where}: the learner checkpoint cannot be read ({reason}): it is damaged or not "
            "this run's; the run cannot be resumed from it"
        ) from None


def restore_learner(run_dir: str, learner: Any, run: dict[str, Any]) -> str:
    """Restores ``learner`` to the checkpoint ``run`` names; returns the restored state's digest."""
    ocp = orbax_checkpoint()

    manager = ocp.CheckpointManager(os.path.join(os.path.abspath(run_dir), "checkpoints", "learner"))
    template = jax.tree_util.tree_map(np.asarray, learner.save())
    with _readable(run_dir, run):  # (checked before the run started; the file may have changed since)
        restored = manager.restore(run["learner_step"], args=ocp.args.StandardRestore(template))
    learner.restore(restored)
    return digest(jax.tree_util.tree_map(np.asarray, learner.save()))
