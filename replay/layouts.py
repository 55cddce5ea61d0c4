"""The batches a replay dataset yields, as zeros, from the specs alone (numpy; no Reverb).

What a learner compiles its update with before data arrives, and what benchmarks fill with
random numbers to feed a learner where no replay server runs (a GPU machine with current JAX).
``shoal.replay.dataset`` lays real samples out the same way:

* transitions: ``[batch_size, num_steps, ...]`` of ``observation, action, reward, discount,
  next_observation`` (and ``extras``), plus ``probability`` and ``table_size`` (sampling);
* sequences: ``[rows, length, ...]`` of the ``Step`` fields ``observation, action, reward,
  terminated, truncated, next_observation`` (and ``extras``); env sequences sampled by priority
  add their ``probability`` ``[rows]``.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from shoal.core.specs import ArraySpec, EnvironmentSpec, ObservationSpec, map_observation
from shoal.core.types import Sample


def _zeros(spec: ArraySpec, leading: tuple[int, ...]) -> np.ndarray:
    return np.zeros((*leading, *spec.shape), spec.dtype)


def _observation(spec: ObservationSpec, leading: tuple[int, ...]) -> np.ndarray | dict[str, np.ndarray]:
    """Zeros of one observation's array, or a dict of them (a Dict observation)."""
    return map_observation(lambda s: _zeros(s, leading), spec)


def _with_extras(fields: dict, extras_spec: Mapping[str, ArraySpec], leading: tuple[int, ...]) -> dict:
    if extras_spec:
        fields["extras"] = {name: _zeros(s, leading) for name, s in extras_spec.items()}
    return fields


def transition_example(
    spec: EnvironmentSpec, extras_spec: Mapping[str, ArraySpec], batch_size: int, num_steps: int
) -> Sample:
    """A transition batch of zeros, ``[batch_size, num_steps, ...]``."""
    lead = (batch_size, num_steps)
    scalar = np.zeros(lead, np.float32)
    return Sample(
        _with_extras(
            {
                "observation": _observation(spec.observation, lead),
                "action": _zeros(spec.action, lead),
                "reward": scalar,
                "discount": scalar.copy(),
                "next_observation": _observation(spec.observation, lead),
                "probability": scalar.copy(),
                "table_size": scalar.copy(),
            },
            extras_spec,
            lead,
        ),
        np.zeros((num_steps, 1), np.uint64),
    )


def sequence_example(spec: EnvironmentSpec, extras_spec: Mapping[str, ArraySpec], rows: int, length: int) -> Sample:
    """A sequence batch of zeros, ``[rows, length, ...]``."""
    lead = (rows, length)
    flag = np.zeros(lead, bool)
    return Sample(
        _with_extras(
            {
                "observation": _observation(spec.observation, lead),
                "action": _zeros(spec.action, lead),
                "reward": np.zeros(lead, np.float32),
                "terminated": flag,
                "truncated": flag.copy(),
                "next_observation": _observation(spec.observation, lead),
            },
            extras_spec,
            lead,
        ),
        np.zeros(1, np.uint64),
    )


def env_sequence_example(
    spec: EnvironmentSpec, extras_spec: Mapping[str, ArraySpec], batch_size: int, length: int
) -> Sample:
    """An env-sequence batch of zeros, ``[batch_size, length, ...]`` and ``probability`` ``[batch_size]``."""
    sequences = sequence_example(spec, extras_spec, batch_size, length).data
    return Sample({**sequences, "probability": np.ones(batch_size, np.float32)}, np.zeros(batch_size, np.uint64))
