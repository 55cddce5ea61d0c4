"""Checkpoints of the compiled loop (``shoal.launch.experiments.anakin``): its whole carry (the
agent's training state, every env's state and observation, DQN's or SAC's replay ring, the keys)
saved where a learner's state goes (``checkpoints/learner/<step>``, orbax, through
``run_directory.checkpoints``), and the host's counters in ``checkpoints/run.json`` under
``anakin``. Everything the next dispatch reads is in them, so a resumed run makes the same
dispatches, draws the same keys and evaluates the same way as a run that never stopped
(``tests/test_anakin.py`` checks it row by row).

The carry is saved as the list of its leaves (plain arrays, on any JAX and orbax): its structure
comes from the run's config, which rebuilds the same carry to restore into. Its first leaves are
the agent's training state (the carry's first field), so ``restore_params`` takes a policy's
parameters out of a checkpoint without the envs (``load_policy``, ``shoal evaluate/export``).
"""

from __future__ import annotations

import os
from typing import Any

import jax
import numpy as np

from shoal.core.specs import EnvironmentSpec
from shoal.launch.experiments.run_directory.checkpoints import (
    Checkpointer,
    _readable,
    commit,
    orbax_checkpoint,
    read_run,
    restore_learner,
    spec_record,
)

HOST_FIELDS = ("env_steps", "updates", "learner_steps", "num_evals", "last_return")


class LoopState:
    """The carry as ``Checkpointer.save`` and ``restore_learner`` take a learner: ``save()`` (its
    leaves as host arrays, and ``version``: the updates done) and ``restore(saved)``."""

    def __init__(self, carry: Any, updates: int) -> None:
        self.carry, self.updates = carry, updates

    def save(self) -> dict[str, Any]:
        leaves = [np.asarray(x) for x in jax.tree_util.tree_leaves(jax.device_get(self.carry))]
        return {"version": np.asarray(self.updates, np.int64), "leaves": leaves}

    def restore(self, saved: dict[str, Any]) -> None:
        treedef = jax.tree_util.tree_structure(self.carry)
        self.carry = jax.tree_util.tree_unflatten(treedef, [np.asarray(x) for x in saved["leaves"]])
        self.updates = int(saved["version"])


def save_checkpoint(
    run_dir: str, checkpointer: Checkpointer, carry: Any, host: dict[str, Any], agent: str, spec: EnvironmentSpec
) -> None:
    """Writes the carry and ``host`` (``HOST_FIELDS``), then ``run.json``: the checkpoint's last step."""
    written = checkpointer.save(host["env_steps"], LoopState(carry, host["updates"]))
    commit(
        run_dir,
        written,
        host["env_steps"],
        agent=agent,
        spec=spec_record(spec),
        counter={"env_steps": int(host["env_steps"]), "learner_steps": int(host["learner_steps"])},
        evaluator=None,
        actors={},
        anakin={key: host[key] for key in HOST_FIELDS},
    )


def restore_checkpoint(run_dir: str, template: Any) -> tuple[Any, dict[str, Any]]:
    """``(carry, host counters)`` of ``run_dir``'s latest checkpoint, the carry shaped as
    ``template`` (host arrays; the run directory was checked by ``claim_run_directory``)."""
    run = read_run(run_dir)
    if run is None or not isinstance(run.get("anakin"), dict):
        raise ValueError(f"{run_dir} holds no checkpoint of the compiled loop (--launcher anakin) to resume")
    state = LoopState(template, 0)
    restore_learner(run_dir, state, run)
    host = run["anakin"]
    missing = [key for key in HOST_FIELDS if key not in host]
    if missing:
        raise ValueError(
            f"{run_dir}/checkpoints/run.json: anakin.{missing[0]} is missing; the checkpoint is incomplete"
        )
    return state.carry, dict(host)


def restore_params(run_dir: str, step: int, builder: Any, networks: Any) -> Any:
    """The policy's parameters in the compiled loop's checkpoint ``step`` of ``run_dir`` (host
    arrays): the carry's first leaves, the agent's training state (PPO's, DQN's or SAC's), shaped
    as ``builder.init_state``'s; a checkpoint whose leaves do not fit is one ``ValueError`` naming it."""
    ocp = orbax_checkpoint()
    manager = ocp.CheckpointManager(os.path.join(os.path.abspath(run_dir), "checkpoints", "learner"))
    with _readable(run_dir, {"learner_step": step}):
        saved = manager.restore(step, args=ocp.args.PyTreeRestore())
    template = jax.eval_shape(lambda key: builder.init_state(key, networks), jax.random.PRNGKey(0))  # (shapes only)
    wanted = jax.tree_util.tree_leaves(template)
    leaves = saved.get("leaves") if isinstance(saved, dict) else None
    if isinstance(leaves, dict):  # (an orbax that reads a list back as {"0": ..., "1": ...})
        leaves = [leaves[key] for key in sorted(leaves, key=int)]
    leaves = [np.asarray(x) for x in leaves[: len(wanted)]] if isinstance(leaves, list) else []
    if len(leaves) < len(wanted) or any(
        a.shape != tuple(b.shape) or a.dtype != b.dtype for a, b in zip(leaves, wanted)
    ):
        raise ValueError(
            f"{os.path.join(run_dir, 'checkpoints', 'learner', str(step))}: the compiled loop's checkpoint does not "
            "hold this run's training state (damaged, or written by another agent or network)"
        )
    state = jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(template), leaves)
    return state["params"] if isinstance(state, dict) else state.params
