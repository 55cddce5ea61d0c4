"""Table signatures, derived from the environment spec plus the policy's extras spec.

Replay items hold whole vector steps, so every field has a leading ``[num_envs]`` dimension:

* a *transition* item (``NStepTransitionAdder``): ``observation, action, reward, discount,
  next_observation`` and ``extras``, each ``[num_envs, ...]``;
* a *sequence* item (``SequenceAdder``): the fields of ``shoal.core.Step`` stacked over
  ``length`` vector steps, time-major as Reverb stores trajectories: ``[length, num_envs, ...]``;
* an *env sequence* item (``EnvSequenceAdder``): one env's ``length`` steps, ``[length, ...]``.

``extras`` is omitted from a signature when the policy declares none. A Dict observation's
``observation`` and ``next_observation`` are dicts of one spec per key (each with
its own dtype: uint8 frames stay uint8).

Leaves are ``shoal.core.specs.ArraySpec``s with the items' full shapes (no TensorFlow: a
``TableSpec`` takes them, and ``ReverbServer`` hands them to Reverb as its ``StructuredValue``
bytes). Reverb serves them back as ``tf.TensorSpec``s (``server_info``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from shoal.core.specs import ArraySpec, EnvironmentSpec, ObservationSpec, map_observation


def _tensor(spec: ArraySpec, leading: tuple[int, ...]) -> ArraySpec:
    return ArraySpec((*leading, *spec.shape), spec.dtype)


def _observation(spec: ObservationSpec, leading: tuple[int, ...]) -> Any:
    return map_observation(lambda s: _tensor(s, leading), spec)


def _with_extras(fields: dict, extras_spec: Mapping[str, ArraySpec], leading: tuple[int, ...]) -> dict:
    if extras_spec:
        fields["extras"] = {name: _tensor(s, leading) for name, s in extras_spec.items()}
    return fields


def transition_signature(spec: EnvironmentSpec, extras_spec: Mapping[str, ArraySpec]) -> dict:
    """One batched n-step transition: ``[num_envs, ...]`` per field."""
    e = (spec.num_envs,)
    scalar = ArraySpec((), np.float32)
    return _with_extras(
        {
            "observation": _observation(spec.observation, e),
            "action": _tensor(spec.action, e),
            "reward": _tensor(scalar, e),
            "discount": _tensor(scalar, e),
            "next_observation": _observation(spec.observation, e),
        },
        extras_spec,
        e,
    )


def step_signature(spec: EnvironmentSpec, extras_spec: Mapping[str, ArraySpec], leading: tuple[int, ...] = ()) -> dict:
    """The fields of one ``Step`` (``[*leading, num_envs, ...]``)."""
    return _step_fields(spec, extras_spec, (*leading, spec.num_envs))


def _step_fields(spec: EnvironmentSpec, extras_spec: Mapping[str, ArraySpec], e: tuple[int, ...]) -> dict:
    flag = ArraySpec((), np.bool_)
    return _with_extras(
        {
            "observation": _observation(spec.observation, e),
            "action": _tensor(spec.action, e),
            "reward": _tensor(ArraySpec((), np.float32), e),
            "terminated": _tensor(flag, e),
            "truncated": _tensor(flag, e),
            "next_observation": _observation(spec.observation, e),
        },
        extras_spec,
        e,
    )


def sequence_signature(spec: EnvironmentSpec, extras_spec: Mapping[str, ArraySpec], length: int) -> dict:
    """``length`` stacked vector steps, time-major: ``[length, num_envs, ...]`` per field."""
    return step_signature(spec, extras_spec, leading=(length,))


def env_sequence_signature(spec: EnvironmentSpec, extras_spec: Mapping[str, ArraySpec], length: int) -> dict:
    """One env's ``length`` steps: ``[length, ...]`` per field."""
    return _step_fields(spec, extras_spec, (length,))
