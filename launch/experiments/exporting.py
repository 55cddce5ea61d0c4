"""A trained policy as a file that JAX alone runs: ``export_policy`` (``shoal export RUN_DIR --out FILE``).

The run's greedy policy (``load_policy``'s, on the parameters of its last complete checkpoint or
of ``checkpoint``) is traced with a symbolic batch size and serialized by ``jax.export``: the
parameters are constants inside it, so the file is the whole policy. Beside it, ``FILE.json``
says what it takes and gives (the observation's shape and dtype per key, the action's) and
where it came from (agent, env, checkpoint, JAX version). A program with JAX alone (no Shoal,
no TensorFlow, no Reverb) runs it::

    import numpy as np
    from jax import export
    with open("policy.jax", "rb") as f:
        act = export.deserialize(bytearray(f.read()))
    actions = act.call(np.zeros((8, 4), np.float32))   # a batch of 8 CartPole observations

A Dict observation is a dict of batches (the keys as ``FILE.json`` lists them). The artifact is
lowered for CPU and CUDA GPUs, and loads with the JAX that wrote it or a newer one within
``jax.export``'s compatibility window (about six months of releases). Recurrent policies (R2D2, recurrent PPO) are not exported: their
state would need a second function (``load_policy`` runs them).
"""

from __future__ import annotations

import json
import os
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import export as jax_export  # (a submodule to import on JAX 0.4.34)

from shoal.core.files import write_atomic
from shoal.core.types import ActorInfo

PLATFORMS = ("cpu", "cuda")


def _structs(spec: Any, batch: Any) -> Any:
    """``jax.ShapeDtypeStruct``s of a batch of observations of ``spec`` (a dict for Dict spaces)."""
    if isinstance(spec, dict):
        return {key: _structs(value, batch) for key, value in spec.items()}
    return jax.ShapeDtypeStruct((batch, *spec.shape), np.dtype(spec.dtype))


def _described(spec: Any) -> Any:
    if isinstance(spec, dict):
        return {key: _described(value) for key, value in spec.items()}
    return {"shape": list(spec.shape), "dtype": np.dtype(spec.dtype).name}


def export_policy(run_dir: str, out: str, checkpoint: int | None = None, batch_size: int | None = None,
                  trust_run_dir: bool = False, **named: Any) -> dict[str, Any]:
    """Writes the run's greedy policy to ``out`` (``jax.export``'s serialized function) and
    ``out + ".json"`` (its inputs, outputs and origin); returns what the JSON file holds.
    ``batch_size``: the one batch size the function takes (default: any, a symbolic size; JAX
    0.4.34 cannot trace a policy that draws random numbers so, e.g. DQN's). ``checkpoint``,
    ``trust_run_dir`` and ``named`` as for ``load_policy``."""
    if batch_size is not None and (not isinstance(batch_size, int) or batch_size < 1):
        raise ValueError(f"--batch-size must be a positive integer, got {batch_size!r}")
    from shoal.agents.registry import agent_name
    from shoal.launch.experiments.trained import load_policy

    directory = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(directory):
        raise ValueError(f"--out {out!r}: its directory {directory} does not exist")
    if os.path.isdir(out):
        raise ValueError(f"--out {out!r} is a directory: give a file name (e.g. {os.path.join(out, 'policy.jax')})")
    policy = load_policy(run_dir, checkpoint, greedy=True, trust_run_dir=trust_run_dir, **named)
    acting = policy.policy
    if acting.initial_state is not None:
        raise ValueError(f"the policy of {run_dir} is recurrent ({agent_name(policy.config.builder)}): shoal export "
                         "writes feed-forward policies only; shoal.load_policy runs it in Python")
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
        raise ValueError(f"JAX {jax.__version__} cannot export this policy for any batch size ({str(e).splitlines()[0]}): "
                         "give one with --batch-size N") from e
    action = exported.out_avals[0]
    about = {"format": "jax.export", "agent": agent_name(policy.config.builder), "env": policy.config.env_id,
             "checkpoint": policy.checkpoint, "run_dir": os.path.abspath(run_dir), "jax": jax.__version__,
             "platforms": list(PLATFORMS), "observation": _described(policy.spec.observation),
             "action": {"shape": [str(d) for d in action.shape], "dtype": np.dtype(action.dtype).name,
                        "num_actions": policy.spec.num_actions},
             "call": "from jax import export; export.deserialize(bytearray(open(FILE, 'rb').read())).call(observations)"}
    write_atomic(out, bytes(exported.serialize()))
    write_atomic(out + ".json", json.dumps(about, indent=1) + "\n")
    return {"out": out, **about}
