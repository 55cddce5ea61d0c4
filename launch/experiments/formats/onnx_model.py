"""A trained policy as an ONNX model (``shoal export RUN_DIR --format onnx --out policy.onnx``).

``exporting.export_policy`` hands this module the run's greedy policy as a JAX function of a
batch of observations; ``to_onnx_bytes`` converts it with jax2onnx (which reads the function's
jaxpr: no TensorFlow) into one self-contained ONNX model, the parameters its initializers. The
model's inputs are the observation (one input per key of a Dict observation, named after the
key; ``observation`` otherwise), each with a symbolic batch dimension ``batch`` unless
``--batch-size`` fixed it; its first output is ``action`` (discrete: int32 indices; continuous:
the policy's mean action, as ``load_policy`` acts greedily). A recurrent policy's state is
explicit: inputs ``state_0``, ``state_1``, ... (fresh episodes: zeros) and outputs
``next_state_0``, ... of the same shapes, fed back at the next step.

The model's ``metadata_props`` say what it takes and gives, as JSON: ``observation`` and
``action`` (the specs), ``state`` (a recurrent policy's), ``shoal`` (everything ``shoal
export`` prints: agent, env, checkpoint, converter). Any runtime of ONNX runs it, e.g.
``onnxruntime`` (no JAX, no Shoal)::

    import numpy as np, onnxruntime as ort
    session = ort.InferenceSession("policy.onnx")
    actions = session.run(["action"], {"observation": np.zeros((8, 4), np.float32)})[0]

jax2onnx needs JAX >= 0.8.1 and numpy 2, so Python 3.12+ (Shoal's 3.11 stack is JAX 0.4.34):
there, and where it is not installed, ``require_converter`` says so in one line. It is
installed without its dependencies (``JAX2ONNX_INSTALL``): its release pins
``orbax-checkpoint<0.11.37``, which it never imports, and a plain install would replace the
``orbax-checkpoint`` Shoal's checkpoints are tested with; the ``onnx`` extra holds what it does
import.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from importlib.metadata import version
from typing import Any

import jax

JAX2ONNX = "jax2onnx==0.17.1"  # the converter release the tests ran
JAX2ONNX_INSTALL = f"pip install 'shoal[onnx]' && pip install --no-deps {JAX2ONNX}"
OPSET = 17  # ONNX opset of the model (onnxruntime >= 1.14 runs it)


def require_converter() -> None:
    """Raises ``ValueError`` (one line) where jax2onnx cannot run: Python < 3.12, or not installed."""
    if sys.version_info < (3, 12):
        raise ValueError(
            f"--format onnx needs jax2onnx, which needs JAX >= 0.8.1 and numpy 2: Python 3.12 or later "
            f"(this is Python {sys.version_info.major}.{sys.version_info.minor} with JAX {jax.__version__}); "
            "export with --format jax here, or from a Python 3.12+ install of Shoal"
        )
    try:
        import jax2onnx  # noqa: F401 -- lazy: optional extra (onnx)
        import onnx  # noqa: F401 -- lazy: optional extra (onnx)
    except ImportError as e:
        raise ValueError(f"--format onnx needs the onnx extra ({e.name} is missing): {JAX2ONNX_INSTALL}") from None


def input_names(observation: Any) -> list[str]:
    """The model's observation inputs: one per key of a Dict observation (its key, sorted), else ``observation``."""
    return sorted(observation) if isinstance(observation, dict) else ["observation"]


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}".rstrip(": ")


def convert(act: Callable[..., Any], inputs: list[Any], names: list[str], outputs: list[str]) -> Any:
    """The ONNX model (an ``onnx.ModelProto``) of ``act``, a function of positional arrays
    ``inputs`` (``jax.ShapeDtypeStruct``s, named ``names``) returning arrays (named
    ``outputs``). Whatever jax2onnx cannot express, or a model ONNX's checker refuses, is a
    ``ValueError`` of one line."""
    import jax2onnx  # lazy: optional extra (onnx)
    import onnx  # lazy: optional extra (onnx)

    try:
        model = jax2onnx.to_onnx(
            act, inputs, model_name="shoal_policy", opset=OPSET, input_names=names, output_names=outputs
        )
        onnx.checker.check_model(model)
    except Exception as e:  # (NotImplementedError for a primitive without a plugin, and others)
        raise ValueError(
            f"jax2onnx {_version('jax2onnx')} cannot express this policy in ONNX ({_first_line(e)}); "
            "export it with --format jax, or run it with shoal.load_policy"
        ) from e
    return model


def _version(name: str) -> str:
    return version(name)


def converter() -> dict[str, Any]:
    """What made the model and what runs it (``shoal export``'s description)."""
    return {
        "opset": OPSET,
        "converter": f"jax2onnx {_version('jax2onnx')}",
        "needs": ["onnxruntime (or another ONNX runtime)", "numpy"],
    }


def serialized(model: Any, metadata: dict[str, Any]) -> bytes:
    """``model``'s bytes, ``metadata`` (each value as JSON) in its ``metadata_props``; a model
    too large for one protobuf (2 GiB) is a one-line ``ValueError``."""
    for key, value in metadata.items():
        entry = model.metadata_props.add()
        entry.key, entry.value = key, json.dumps(value)
    model.producer_name, model.doc_string = "shoal", "a Shoal run's greedy policy (shoal export --format onnx)"
    try:
        return model.SerializeToString()
    except ValueError as e:
        raise ValueError(f"the ONNX model is too large to write as one file ({_first_line(e)})") from e


def described_inputs(model: Any) -> list[dict[str, Any]]:
    """``model``'s inputs: name, element dtype and shape (a symbolic dimension by its name)."""
    import onnx  # lazy: optional extra (onnx)

    return [
        {
            "name": value.name,
            "dtype": onnx.helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type).name,
            "shape": [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim],
        }
        for value in model.graph.input
    ]


__all__ = [
    "JAX2ONNX",
    "JAX2ONNX_INSTALL",
    "OPSET",
    "convert",
    "converter",
    "described_inputs",
    "input_names",
    "require_converter",
    "serialized",
]
