"""Specs: the shapes and dtypes an agent needs, read off gymnasium spaces."""

from __future__ import annotations

import dataclasses

import gymnasium as gym
import numpy as np


@dataclasses.dataclass(frozen=True)
class ArraySpec:
    """The shape and dtype of one array (for one env: no batch dimension)."""

    shape: tuple[int, ...]
    dtype: np.dtype

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))
        object.__setattr__(self, "dtype", np.dtype(self.dtype))

    def zeros(self, *leading: int) -> np.ndarray:
        return np.zeros((*leading, *self.shape), self.dtype)


@dataclasses.dataclass(frozen=True)
class EnvironmentSpec:
    """What an agent must know about one (single, unbatched) environment.

    Attributes:
      observation_space / action_space: the single-env gymnasium spaces.
      observation / action: the ``ArraySpec`` of one observation / action as Shoal stores it
        (float observations become float32; discrete actions int32, continuous float32).
      num_actions: number of discrete actions, or ``None`` for continuous (Box) actions.
      num_envs: how many copies an actor steps together (the vector env's size; 1 for a
        plain env). Replay items hold one vector step or chunk, so their shapes depend on it.
    """

    observation_space: gym.Space
    action_space: gym.Space
    observation: ArraySpec
    action: ArraySpec
    num_actions: int | None
    num_envs: int = 1

    @property
    def discrete_actions(self) -> bool:
        return self.num_actions is not None

    @property
    def observation_shape(self) -> tuple[int, ...]:
        return self.observation.shape


def make_environment_spec(env: gym.Env | gym.vector.VectorEnv, num_envs: int | None = None) -> EnvironmentSpec:
    """Builds the spec of a gymnasium env or vector env (using its *single* spaces); its
    ``num_envs`` is the vector env's size, or the ``num_envs`` given (a single env read for the
    spec of a vector env of that size)."""
    obs_space = getattr(env, "single_observation_space", env.observation_space)
    act_space = getattr(env, "single_action_space", env.action_space)
    if not isinstance(obs_space, gym.spaces.Box):
        raise ValueError(
            f"observation space {obs_space} is not supported; Shoal agents take Box observations "
            "(wrap the env, e.g. with gymnasium.wrappers.FlattenObservation)")
    if isinstance(act_space, gym.spaces.Discrete):
        num_actions, action = int(act_space.n), ArraySpec((), np.int32)
    elif isinstance(act_space, gym.spaces.Box):
        num_actions, action = None, ArraySpec(act_space.shape, np.float32)
    else:
        raise ValueError(f"action space {act_space} is not supported; Shoal agents take Discrete "
                         "or Box actions")
    # Observations are fed to networks as float32 whatever the env emits (e.g. float64).
    obs_dtype = np.float32 if np.issubdtype(obs_space.dtype, np.floating) else obs_space.dtype
    return EnvironmentSpec(
        observation_space=obs_space, action_space=act_space,
        observation=ArraySpec(obs_space.shape, obs_dtype), action=action,
        num_actions=num_actions, num_envs=int(num_envs if num_envs is not None else getattr(env, "num_envs", 1)))
