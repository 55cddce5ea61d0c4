"""A trained policy as a file JAX runs without Shoal: ``export_policy`` (``shoal export RUN_DIR --out FILE``).

The run's greedy policy (``load_policy``'s networks, on the parameters of its last complete
checkpoint or of ``checkpoint``; made fully greedy: an evaluation that explores, DQN's
``eval_epsilon`` or PPO's and IMPALA's ``eval_sample``, is set to none, so the function draws no
random numbers) is traced with a symbolic batch size and serialized by ``jax.export``: the
parameters are constants inside it, so the file is the whole policy. Beside it, ``FILE.json``
says what it takes and gives (the observation's shape and dtype per key, the action's) and
where it came from (agent, env, checkpoint, JAX version). A program with JAX, the
``flatbuffers`` package ``jax.export``'s reader imports and, for older JAX (0.4.34 among them),
``absl-py``, which its ``jax.export`` imports (``pip install jax flatbuffers absl-py``: JAX
installs neither; no Shoal, no TensorFlow, no Reverb) runs it::

    import numpy as np
    from jax import export
    with open("policy.jax", "rb") as f:
        act = export.deserialize(bytearray(f.read()))
    actions = act.call(np.zeros((8, 4), np.float32))   # a batch of 8 CartPole observations

A Dict observation is a dict of batches (the keys as ``FILE.json`` lists them). The artifact is
lowered for CPU and CUDA GPUs, and loads with the JAX that wrote it or a newer one within
``jax.export``'s compatibility window (about six months of releases). Recurrent policies (R2D2, recurrent PPO) are not exported: their
state would need a second function (``load_policy`` runs them).

Nothing is written into a run directory (``FILE`` in the exported run's directory, or in any
Shoal run's, e.g. ``RUN_DIR/config.json``, is refused) nor through a symbolic link (one at
``FILE`` or ``FILE.json`` is refused: ``shoal.core.files.write_output``); every such check is
made before the run is read, and both files are written only once the export succeeded.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import export as jax_export  # (a submodule to import on JAX 0.4.34)

from shoal.core.files import check_output, write_output
from shoal.core.types import ActorInfo

PLATFORMS = ("cpu", "cuda")

# What a program needs to load the file (docs/trained-policy.md: pip install jax flatbuffers absl-py).
NEEDS = [f"jax>={jax.__version__}", "flatbuffers", "absl-py"]

# The agent settings that make an evaluation policy explore, and their greedy values (an export is greedy).
GREEDY_SETTINGS = {"eval_epsilon": 0.0, "eval_sample": False}


def _structs(spec: Any, batch: Any) -> Any:
    """``jax.ShapeDtypeStruct``s of a batch of observations of ``spec`` (a dict for Dict spaces)."""
    if isinstance(spec, dict):
        return {key: _structs(value, batch) for key, value in spec.items()}
    return jax.ShapeDtypeStruct((batch, *spec.shape), np.dtype(spec.dtype))


def _described(spec: Any) -> Any:
    if isinstance(spec, dict):
        return {key: _described(value) for key, value in spec.items()}
    return {"shape": list(spec.shape), "dtype": np.dtype(spec.dtype).name}


def _is_run_directory(directory: str) -> bool:
    """Whether ``directory`` is a Shoal run's (its ``config.json``, with the ``.lock`` a run
    writes or its ``checkpoints/``)."""
    return os.path.isfile(os.path.join(directory, "config.json")) and (
        os.path.isfile(os.path.join(directory, ".lock")) or os.path.isdir(os.path.join(directory, "checkpoints"))
    )


def check_out(run_dir: str, out: str) -> None:
    """Refuses (``ValueError``, one line) an ``out`` that ``export_policy`` must not write: in a
    missing directory, a directory itself, inside ``run_dir`` or any run directory (links
    resolved), or a symbolic link (``out`` or ``out + ".json"``)."""
    directory = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(directory):
        raise ValueError(f"--out {out!r}: its directory {directory} does not exist")
    if os.path.isdir(out) and not os.path.islink(out):
        raise ValueError(f"--out {out!r} is a directory: give a file name (e.g. {os.path.join(out, 'policy.jax')})")
    own, at = os.path.realpath(run_dir), os.path.realpath(directory)
    while True:
        if at == own or _is_run_directory(at):
            raise ValueError(
                f"--out {out!r} is inside the run directory {at}: shoal export writes nothing into a "
                "run directory (it would replace the run's own files); give a path outside it"
            )
        parent = os.path.dirname(at)
        if parent == at:
            break
        at = parent
    for path in (out, out + ".json"):
        check_output(path)


def greedy_builder(builder: Any) -> Any:
    """``builder``, or a copy whose config has no exploring evaluation (``GREEDY_SETTINGS``)."""
    config = getattr(builder, "config", None)
    if not dataclasses.is_dataclass(config):
        return builder
    changes = {
        key: value for key, value in GREEDY_SETTINGS.items() if hasattr(config, key) and getattr(config, key) != value
    }
    if not changes:
        return builder
    greedy = copy.copy(builder)
    greedy.config = dataclasses.replace(config, **changes)
    return greedy


def export_policy(
    run_dir: str,
    out: str,
    checkpoint: int | None = None,
    batch_size: int | None = None,
    trust_run_dir: bool = False,
    **named: Any,
) -> dict[str, Any]:
    """Writes the run's greedy policy to ``out`` (``jax.export``'s serialized function) and
    ``out + ".json"`` (its inputs, outputs and origin); returns what the JSON file holds.
    ``batch_size``: the one batch size the function takes (default: any, a symbolic size; a
    plug-in policy that draws random numbers even when greedy may need one on JAX 0.4.34).
    ``checkpoint``, ``trust_run_dir`` and ``named`` as for ``load_policy``. ``out`` is refused
    (one line, nothing written) as ``check_out`` says."""
    if batch_size is not None and (not isinstance(batch_size, int) or batch_size < 1):
        raise ValueError(f"--batch-size must be a positive integer, got {batch_size!r}")
    from shoal.agents.registry import agent_name
    from shoal.launch.experiments.trained_policy import load_policy

    check_out(run_dir, out)
    policy = load_policy(run_dir, checkpoint, greedy=True, trust_run_dir=trust_run_dir, **named)
    acting = greedy_builder(policy.config.builder).make_policy(policy.networks, policy.spec, True)
    if acting.initial_state is not None:
        raise ValueError(
            f"the policy of {run_dir} is recurrent ({agent_name(policy.config.builder)}): shoal export "
            "writes feed-forward policies only; shoal.load_policy runs it in Python"
        )
    params = jax.tree_util.tree_map(jnp.asarray, policy.params)

    def act(observation):
        actions, _, _ = acting.apply(params, jax.random.PRNGKey(0), observation, ActorInfo(0, 1))
        return actions

    batch = jax_export.symbolic_shape("batch")[0] if batch_size is None else batch_size
    try:
        exported = jax_export.export(jax.jit(act), platforms=PLATFORMS)(_structs(policy.spec.observation, batch))
    except Exception as e:  # (a symbolic batch this JAX cannot trace: InconclusiveDimensionOperation)
        if type(e).__name__ != "InconclusiveDimensionOperation":
            raise
        raise ValueError(
            f"JAX {jax.__version__} cannot export this policy for any batch size ({str(e).splitlines()[0]}): "
            "give one with --batch-size N"
        ) from e
    action = exported.out_avals[0]
    about = {
        "format": "jax.export",
        "policy": "greedy",
        "agent": agent_name(policy.config.builder),
        "env": policy.config.env.id,
        "checkpoint": policy.checkpoint,
        "run_dir": os.path.abspath(run_dir),
        "jax": jax.__version__,
        "platforms": list(PLATFORMS),
        "observation": _described(policy.spec.observation),
        "action": {
            "shape": [str(d) for d in action.shape],
            "dtype": np.dtype(action.dtype).name,
            "num_actions": policy.spec.num_actions,
        },
        "needs": NEEDS,
        "call": "from jax import export; export.deserialize(bytearray(open(FILE, 'rb').read())).call(observations)",
    }
    write_output(out, bytes(exported.serialize()))
    write_output(out + ".json", json.dumps(about, indent=1) + "\n")
    return {"out": out, **about}
