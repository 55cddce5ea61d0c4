"""A trained policy as a file that runs without Shoal: ``export_policy`` (``shoal export RUN_DIR
--out FILE [--format jax|onnx]``).

The run's greedy policy (``load_policy``'s networks, on the parameters of its last complete
checkpoint or of ``checkpoint``; made fully greedy: an evaluation that explores, DQN's and
R2D2's ``eval_epsilon`` or PPO's and IMPALA's ``eval_sample``, is set to none, so the function
draws no random numbers and its batch size stays symbolic on every JAX) is traced with a
symbolic batch size. The parameters are constants inside the file, so the file is the whole
policy. Two formats:

* ``jax`` (the default, any Python): serialized by ``jax.export``. Beside it, ``FILE.json`` says
  what it takes and gives (the observation's shape and dtype per key, the action's) and where it
  came from (agent, env, checkpoint, JAX version). A program with JAX, the ``flatbuffers``
  package ``jax.export``'s reader imports and, for older JAX (0.4.34 among them), ``absl-py``,
  which its ``jax.export`` imports (``pip install jax flatbuffers absl-py``: JAX installs
  neither; no Shoal, no TensorFlow, no Reverb) runs it::

      import numpy as np
      from jax import export
      with open("policy.jax", "rb") as f:
          act = export.deserialize(bytearray(f.read()))
      actions = act.call(np.zeros((8, 4), np.float32))   # a batch of 8 CartPole observations

  A Dict observation is a dict of batches (the keys as ``FILE.json`` lists them). The artifact
  is lowered for CPU and CUDA GPUs, and loads with the JAX that wrote it or a newer one within
  ``jax.export``'s compatibility window (about six months of releases). Recurrent policies
  (R2D2, recurrent PPO) are refused here: their state would need a second function.
* ``onnx`` (the default for a ``FILE`` ending in ``.onnx``; Python 3.12+ with the ``onnx``
  extra): an ONNX model, its specs in its metadata, a recurrent policy's state an explicit
  input and output (``formats.onnx_model``).

Nothing is written into a run directory (``FILE`` in the exported run's directory, or in any
Shoal run's, e.g. ``RUN_DIR/config.json``, is refused) nor through a symbolic link (one at
``FILE`` or ``FILE.json`` is refused: ``shoal.core.files.write_output``); every such check is
made before the run is read, and the files are written only once the export succeeded.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import export as jax_export  # (a submodule to import on JAX 0.4.34)

from shoal.agents.registry import agent_name
from shoal.core.files import check_output, write_output
from shoal.core.types import ActorInfo
from shoal.launch.experiments.formats import onnx_model
from shoal.launch.experiments.formats.onnx_model import require_converter
from shoal.launch.experiments.run_directory.directory import is_run_directory
from shoal.launch.experiments.trained_policy import load_policy

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


def check_out(run_dir: str, out: str, sidecar: bool = True) -> None:
    """Refuses (``ValueError``, one line) an ``out`` that ``export_policy`` must not write: in a
    missing directory, a directory itself, inside ``run_dir`` or any run directory (links
    resolved), or a symbolic link (``out``, or with ``sidecar`` ``out + ".json"``)."""
    directory = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(directory):
        raise ValueError(f"--out {out!r}: its directory {directory} does not exist")
    if os.path.isdir(out) and not os.path.islink(out):
        raise ValueError(f"--out {out!r} is a directory: give a file name (e.g. {os.path.join(out, 'policy.jax')})")
    own, at = os.path.realpath(run_dir), os.path.realpath(directory)
    while True:
        if at == own or is_run_directory(at):
            raise ValueError(
                f"--out {out!r} is inside the run directory {at}: shoal export writes nothing into a "
                "run directory (it would replace the run's own files); give a path outside it"
            )
        parent = os.path.dirname(at)
        if parent == at:
            break
        at = parent
    for path in (out, out + ".json") if sidecar else (out,):
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
    greedy.config = dataclasses.replace(config, **changes)  # type: ignore[type-var]  # (an instance: it has fields)
    return greedy


FORMATS = ("jax", "onnx")


def export_format(out: str, format: str | None) -> str:
    """The format to write: ``format``, or by ``out``'s suffix (``.onnx``: onnx, else jax); a
    format that is not in ``FORMATS``, or jax for a ``.onnx`` file, is a one-line ``ValueError``."""
    if format is None:
        return "onnx" if out.lower().endswith(".onnx") else "jax"
    if format not in FORMATS:
        raise ValueError(f"--format must be one of {', '.join(FORMATS)}, got {format!r}")
    if format == "jax" and out.lower().endswith(".onnx"):
        raise ValueError(f"--out {out!r} names an ONNX file but --format is jax: give --format onnx, or another name")
    return format


def _policy_function(policy: Any) -> tuple[Callable[..., Any], Any]:
    """The run's fully greedy policy as ``act(observation, state) -> (actions, next_state)`` on
    its parameters (``state`` ``None`` for a feed-forward policy), and its ``initial_state``
    (``None``: feed-forward)."""
    acting = greedy_builder(policy.config.builder).make_policy(policy.networks, policy.spec, True)
    params = jax.tree_util.tree_map(jnp.asarray, policy.params)
    key, info = jax.random.PRNGKey(0), ActorInfo(0, 1)

    def act(observation: Any, state: Any = None) -> tuple[Any, Any]:
        if acting.initial_state is None:
            return acting.apply(params, key, observation, info)[0], None
        actions, _, _, next_state = acting.apply(params, key, observation, info, state)
        return actions, next_state

    return act, acting.initial_state


def _about(policy: Any, run_dir: str, format: str) -> dict[str, Any]:
    return {
        "format": format,
        "policy": "greedy",
        "agent": agent_name(policy.config.builder),
        "env": policy.config.env.id,
        "checkpoint": policy.checkpoint,
        "run_dir": os.path.abspath(run_dir),
        "observation": _described(policy.spec.observation),
    }


def export_policy(
    run_dir: str,
    out: str,
    checkpoint: int | None = None,
    batch_size: int | None = None,
    trust_run_dir: bool = False,
    format: str | None = None,
    **named: Any,
) -> dict[str, Any]:
    """Writes the run's greedy policy to ``out``; returns what describes it (``out`` and the
    file's description). ``format``: ``jax`` (``jax.export``'s serialized function, and ``out +
    ".json"``, its inputs, outputs and origin) or ``onnx`` (an ONNX model, its description in
    its metadata: ``shoal.launch.experiments.formats.onnx_model``); default: by ``out``'s suffix.
    ``batch_size``: the one batch size the function takes (default: any, a symbolic size; a
    plug-in policy that draws random numbers even when greedy may need one on JAX 0.4.34).
    ``checkpoint``, ``trust_run_dir`` and ``named`` as for ``load_policy``. ``out`` is refused
    (one line, nothing written) as ``check_out`` says, and so is what the format cannot hold
    (a recurrent policy in the jax format, what jax2onnx cannot express), before anything is written."""
    if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1):
        raise ValueError(f"--batch-size must be a positive integer, got {batch_size!r}")
    format = export_format(out, format)
    if format == "onnx":
        require_converter()
    check_out(run_dir, out, sidecar=format == "jax")
    policy = load_policy(run_dir, checkpoint, greedy=True, trust_run_dir=trust_run_dir, **named)
    act, initial_state = _policy_function(policy)
    batch = jax_export.symbolic_shape("batch")[0] if batch_size is None else batch_size
    if format == "onnx":
        return _export_onnx(policy, run_dir, out, act, initial_state, batch)
    if initial_state is not None:
        raise ValueError(
            f"the policy of {run_dir} is recurrent ({agent_name(policy.config.builder)}): the jax format "
            "holds feed-forward policies only; export it with --format onnx (its state an input and an "
            "output), or run it with shoal.load_policy"
        )
    try:
        exported = jax_export.export(jax.jit(lambda o: act(o)[0]), platforms=PLATFORMS)(
            _structs(policy.spec.observation, batch)
        )
    except Exception as e:  # (a symbolic batch this JAX cannot trace: InconclusiveDimensionOperation)
        if type(e).__name__ != "InconclusiveDimensionOperation":
            raise
        raise ValueError(
            f"JAX {jax.__version__} cannot export this policy for any batch size ({str(e).splitlines()[0]}): "
            "give one with --batch-size N"
        ) from e
    action = exported.out_avals[0]
    about = {
        **_about(policy, run_dir, "jax.export"),
        "jax": jax.__version__,
        "platforms": list(PLATFORMS),
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


def _export_onnx(
    policy: Any, run_dir: str, out: str, act: Callable[..., Any], initial_state: Any, batch: Any
) -> dict[str, Any]:
    """``export_policy`` in the onnx format (``formats.onnx_model``): inputs the observation (a Dict
    observation's keys, sorted) and a recurrent policy's state leaves, outputs ``action`` and the
    next state's leaves."""
    spec = policy.spec.observation
    names = onnx_model.input_names(spec)
    leaves, tree = jax.tree_util.tree_flatten(None if initial_state is None else initial_state(1))
    leaves = [np.asarray(leaf) for leaf in leaves]
    inputs = [_structs(spec[key], batch) for key in names] if isinstance(spec, dict) else [_structs(spec, batch)]
    inputs += [jax.ShapeDtypeStruct((batch, *leaf.shape[1:]), leaf.dtype) for leaf in leaves]
    state_names = [f"state_{i}" for i in range(len(leaves))]
    for name, leaf in zip(state_names, leaves):
        if leaf.size and not (leaf == leaf.flat[0]).all():
            raise ValueError(
                f"the recurrent policy of {run_dir} starts episodes from a state that is not one value "
                f"({name}): the onnx format describes a fresh state by one value per input"
            )

    def flat(*arrays: Any) -> tuple[Any, ...]:
        observation = dict(zip(names, arrays[: len(names)])) if isinstance(spec, dict) else arrays[0]
        state = jax.tree_util.tree_unflatten(tree, arrays[len(names) :]) if leaves else None
        actions, next_state = act(observation, state)
        return (actions, *jax.tree_util.tree_leaves(next_state))

    action = jax.eval_shape(flat, *inputs)[0]
    symbolic = not isinstance(batch, int)
    model = onnx_model.convert(flat, inputs, names + state_names, ["action"] + ["next_" + n for n in state_names])
    about = {
        **_about(policy, run_dir, "onnx"),
        "inputs": onnx_model.described_inputs(model),
        "action": {
            "output": "action",
            "shape": ["batch" if symbolic else batch, *action.shape[1:]],
            "dtype": np.dtype(action.dtype).name,
            "num_actions": policy.spec.num_actions,
        },
        "state": [
            {
                "input": name,
                "output": "next_" + name,
                "shape": ["batch" if symbolic else batch, *leaf.shape[1:]],
                "dtype": leaf.dtype.name,
                "initial": leaf.flat[0].item() if leaf.size else 0,
            }
            for name, leaf in zip(state_names, leaves)
        ],
        **onnx_model.converter(),
    }
    data = onnx_model.serialized(
        model, {"observation": about["observation"], "action": about["action"], "state": about["state"], "shoal": about}
    )
    write_output(out, data)
    return {"out": out, **about}
