"""The data that flows between actors, adders and policies."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import numpy as np

from shoal.core.specs import ArraySpec

# Pytrees, named for what they hold (to the type checker each is ``Any``: a nested structure of
# arrays has no static type that JAX's transformations keep).
#   Params: a network's parameters (flax's nested dicts of arrays).
#   TrainState: an agent's training state (params, optimizer state, keys, counters), the
#     learner's ``state``.
#   Batch: a dict (or tree) of arrays whose leading axis is the batch (or row) axis.
#   Pytree: any other nest of arrays (observations, extras, recurrent states, metrics' aux).
Params = Any
TrainState = Any
Batch = Any
Pytree = Any


class Step(NamedTuple):
    """One vector step, as it flows actor -> adder. Every field has a leading ``[num_envs]`` dim.

    ``next_observation`` is the observation that follows ``action``: for an env whose episode
    just ended (``terminated`` or ``truncated``), its *final* observation, not the reset one.
    ``extras`` is what the policy returned beside the actions (e.g. log-probs), keyed as the
    policy's ``extras_spec`` declares.
    """

    observation: np.ndarray
    action: np.ndarray
    reward: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    next_observation: np.ndarray
    extras: Mapping[str, np.ndarray]


class Sample(NamedTuple):
    """One learner update's batch from replay, on the host.

    ``data``: a dict of numpy arrays whose *leading* axis is the batch axis (the one a
    data-parallel learner splits over its devices); ``keys``: the replay keys of the sampled
    items (for priority updates), or ``None``.
    """

    data: Mapping[str, Any]
    keys: Any = None


class ActorInfo(NamedTuple):
    """What an actor tells its policy besides the observations (scalars, traced under jit).

    env_steps: env steps this actor took so far (over all its envs), for schedules such as
      epsilon decay.
    params_version: the learner version of the params the actor acts with.
    """

    env_steps: Any
    params_version: Any


class Policy(NamedTuple):
    """A batched, jittable policy and the extras it emits.

    ``apply(params, key, observation, info) -> (actions, extras, key)`` acts for a batch of
    observations ``[num_envs, ...]`` (``info`` an ``ActorInfo``); ``extras`` is a dict of
    ``[num_envs, ...]`` arrays whose per-env shapes and dtypes ``extras_spec`` declares. Replay
    table signatures are derived from the environment spec plus ``extras_spec``.
    """

    apply: Callable[..., tuple[Any, ...]]  # (actions, extras, key), and next_state for a recurrent policy
    extras_spec: Mapping[str, ArraySpec] = {}
    # A recurrent policy: ``initial_state(num_envs)`` gives the state of fresh episodes (a
    # pytree of ``[num_envs, ...]`` arrays), and ``apply(params, key, observation, info,
    # state) -> (actions, extras, key, next_state)``. The actor carries the state from step to
    # step and resets an env's rows where its episode ended; a policy that wants the state it
    # acted from in replay (R2D2's stored state) puts it in its extras. ``None``: feed-forward.
    initial_state: Callable[[int], Any] | None = None
