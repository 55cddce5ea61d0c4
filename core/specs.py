"""Specs: the shapes and dtypes an agent needs, read off gymnasium spaces.

An observation is one array (a ``Box`` space) or a flat mapping key -> array (a ``Dict`` of
``Box`` or ``MultiBinary`` spaces, keyed by strings: the keys name replay's columns, the
checkpointed normalization statistics and the networks' parameters, so an int or tuple key is
refused in one line where the spec is made, before a run writes anything): ``EnvironmentSpec.observation`` is then an ``ArraySpec`` or
a ``dict`` of them, and observations flow as arrays or dicts of arrays from the env through the
actor, replay and batches to the learner. Float arrays are stored as float32, others keep
their dtype (uint8 frames stay uint8). Nested ``Dict`` spaces are refused (flatten them, e.g.
with ``gymnasium.wrappers.FlattenObservation`` on the inner one). ``Discrete`` observations are
not taken here: ``shoal.envs.make_vector_env`` turns them into one-hot float32 vectors first
(``shoal.envs.observations``).

An ``action_mask`` key (``ACTION_MASK``) of a Dict observation is the set of allowed actions
(non-zero: allowed; one entry per discrete action), as PettingZoo and SB3-contrib have it:
networks do not read it, policies never choose a masked action. With a 1-d ``Box`` action it is
the set of the action's entries in use (one per entry; e.g. agents of different action sizes in
one padded layout, ``shoal.envs.multiagent``, which cuts them off): PPO's Gaussian policy
gives an entry not in use a fixed N(0, 1), which no parameter shapes, and acts 0 there.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Protocol, TypeVar

import gymnasium as gym
import numpy as np
from numpy.typing import DTypeLike

ACTION_MASK = "action_mask"


@dataclasses.dataclass(frozen=True)
class ArraySpec:
    """The shape and dtype of one array (for one env: no batch dimension)."""

    shape: tuple[int, ...]
    dtype: DTypeLike  # (any dtype-like, e.g. np.float32: kept as np.dtype(dtype))

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))
        object.__setattr__(self, "dtype", np.dtype(self.dtype))

    def zeros(self, *leading: int) -> np.ndarray:
        return np.zeros((*leading, *self.shape), self.dtype)


T = TypeVar("T")

# One array, or a flat mapping key -> array (a Dict observation space).
ObservationSpec = ArraySpec | Mapping[str, ArraySpec]


def map_observation(fn: Callable[[ArraySpec], T], observation_spec: ObservationSpec) -> T | dict[str, T]:
    """``fn(ArraySpec)`` of a single array's spec, or ``{key: fn(spec)}`` of a Dict's."""
    if isinstance(observation_spec, Mapping):
        return {key: fn(spec) for key, spec in observation_spec.items()}
    return fn(observation_spec)


@dataclasses.dataclass(frozen=True)
class EnvironmentSpec:
    """What an agent must know about one (single, unbatched) environment.

    Attributes:
      observation_space / action_space: the single-env gymnasium spaces.
      observation: the ``ArraySpec`` of one observation as Shoal stores it (float observations
        become float32), or for a Dict observation space a dict key -> ``ArraySpec``.
      action: the ``ArraySpec`` of one action (discrete actions int32, continuous float32).
      num_actions: number of discrete actions, or ``None`` for continuous (Box) actions.
      num_envs: how many copies an actor steps together (the vector env's size; 1 for a
        plain env). Replay items hold one vector step or chunk, so their shapes depend on it.
    """

    observation_space: gym.Space
    action_space: gym.Space
    observation: ObservationSpec
    action: ArraySpec
    num_actions: int | None
    num_envs: int = 1

    @property
    def discrete_actions(self) -> bool:
        return self.num_actions is not None

    @property
    def dict_observations(self) -> bool:
        return isinstance(self.observation, Mapping)

    @property
    def observation_shape(self) -> tuple[int, ...] | dict[str, tuple[int, ...]]:
        """The shape of one observation, or of each key's array for a Dict observation."""
        return map_observation(lambda spec: spec.shape, self.observation)

    @property
    def action_mask(self) -> ArraySpec | None:
        """The spec of the observation's ``action_mask`` key, or ``None``: no masks."""
        return self.observation.get(ACTION_MASK) if isinstance(self.observation, Mapping) else None


def _array_spec(space: gym.Space, where: str) -> ArraySpec:
    if isinstance(space, gym.spaces.Box):
        # Observations are fed to networks as float32 whatever the env emits (e.g. float64).
        return ArraySpec(space.shape, np.float32 if np.issubdtype(space.dtype, np.floating) else space.dtype)
    if isinstance(space, gym.spaces.MultiBinary):
        return ArraySpec(space.shape, np.int8)
    if isinstance(space, gym.spaces.Discrete):
        raise ValueError(
            f"observation space {where}{space} is Discrete; Shoal takes it one-hot encoded "
            "(shoal.envs.make_vector_env does it; or wrap the env with "
            "shoal.envs.observations.OneHotObservation)"
        )
    if isinstance(space, gym.spaces.Dict):
        raise ValueError(
            f"observation space {where}is a nested Dict; Shoal takes a flat Dict of Box spaces "
            "(flatten the inner one, e.g. with gymnasium.wrappers.FlattenObservation)"
        )
    raise ValueError(
        f"observation space {where}{space} is not supported; Shoal agents take Box observations "
        "or a Dict of them (wrap the env, e.g. with gymnasium.wrappers.FlattenObservation)"
    )


def observation_spec(space: gym.Space) -> ObservationSpec:
    """The ``ArraySpec`` of a Box space, or a dict of them for a flat Dict space (one line,
    ``ValueError``, for anything else)."""
    if isinstance(space, gym.spaces.Dict):
        if not space.spaces:
            raise ValueError("observation space is an empty Dict")
        for key in space.spaces:
            if not isinstance(key, str):
                raise ValueError(
                    f"observation space key {key!r} ({type(key).__name__}) is not a string; Shoal "
                    "takes a Dict observation whose keys are strings (rename them in the env)"
                )
        return {key: _array_spec(sub, f"key {key!r}: ") for key, sub in space.spaces.items()}
    return _array_spec(space, "")


def check_action_mask(observation: ObservationSpec, num_actions: int | None, action: ArraySpec | None = None) -> None:
    """Raises ``ValueError`` (one line) for an ``action_mask`` key that is not one entry per
    discrete action (or, for a 1-d continuous ``action``, per entry of it), or that is all there
    is to observe."""
    if not isinstance(observation, Mapping) or ACTION_MASK not in observation:
        return
    mask = observation[ACTION_MASK]
    if num_actions is None:
        if action is None or len(action.shape) != 1 or mask.shape != action.shape:
            raise ValueError(
                f"the observation's action_mask has shape {mask.shape}, but the actions are continuous"
                f"{f' of shape {action.shape}' if action is not None else ''}: a mask of continuous actions "
                "must have one entry per entry of a 1-d action (the entries in use)"
            )
    elif mask.shape != (num_actions,):
        raise ValueError(
            f"the observation's action_mask has shape {mask.shape}; it must have one entry per action, ({num_actions},)"
        )
    if len(observation) == 1:
        raise ValueError("the observation has nothing but an action_mask; agents need something to observe")


class HasSpaces(Protocol):
    """What ``make_environment_spec`` reads of an env: its spaces (a vector env's ``single_`` ones
    where it has them)."""

    observation_space: gym.Space
    action_space: gym.Space


def make_environment_spec(env: HasSpaces, num_envs: int | None = None) -> EnvironmentSpec:
    """Builds the spec of a gymnasium env or vector env (using its *single* spaces); its
    ``num_envs`` is the vector env's size, or the ``num_envs`` given (a single env read for the
    spec of a vector env of that size)."""
    obs_space = getattr(env, "single_observation_space", env.observation_space)
    act_space = getattr(env, "single_action_space", env.action_space)
    observation = observation_spec(obs_space)
    if isinstance(act_space, gym.spaces.Discrete):
        num_actions, action = int(act_space.n), ArraySpec((), np.int32)
    elif isinstance(act_space, gym.spaces.Box):
        num_actions, action = None, ArraySpec(act_space.shape, np.float32)
    else:
        raise ValueError(f"action space {act_space} is not supported; Shoal agents take Discrete or Box actions")
    check_action_mask(observation, num_actions, action)
    return EnvironmentSpec(
        observation_space=obs_space,
        action_space=act_space,
        observation=observation,
        action=action,
        num_actions=num_actions,
        num_envs=int(num_envs if num_envs is not None else getattr(env, "num_envs", 1)),
    )
