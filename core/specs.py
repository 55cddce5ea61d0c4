"""Environment specs: the shapes and dtypes an agent needs, read off gymnasium spaces."""

from __future__ import annotations

import dataclasses

import gymnasium as gym
import numpy as np


@dataclasses.dataclass(frozen=True)
class EnvironmentSpec:
    """What an agent must know about one (single, unbatched) environment.

    Attributes:
      observation_space: the single-env observation space.
      action_space: the single-env action space.
      observation_shape / observation_dtype: of one observation (no batch dimension).
      action_shape / action_dtype: of one action.
      num_actions: number of discrete actions, or ``None`` for non-discrete action spaces.
      num_envs: how many copies an actor steps together (the vector env's size; 1 for a
        plain env). Replay items hold one vector step, so their shapes depend on it.
    """

    observation_space: gym.Space
    action_space: gym.Space
    observation_shape: tuple[int, ...]
    observation_dtype: np.dtype
    action_shape: tuple[int, ...]
    action_dtype: np.dtype
    num_actions: int | None
    num_envs: int = 1

    @property
    def discrete_actions(self) -> bool:
        return self.num_actions is not None


def make_environment_spec(env: gym.Env | gym.vector.VectorEnv) -> EnvironmentSpec:
    """Builds the spec of a gymnasium env or vector env (using its *single* spaces)."""
    obs_space = getattr(env, "single_observation_space", env.observation_space)
    act_space = getattr(env, "single_action_space", env.action_space)
    if not isinstance(obs_space, gym.spaces.Box):
        raise ValueError(
            f"observation space {obs_space} is not supported; Shoal agents take Box observations "
            "(wrap the env, e.g. with gymnasium.wrappers.FlattenObservation)")
    num_actions = int(act_space.n) if isinstance(act_space, gym.spaces.Discrete) else None
    # Observations are fed to networks as float32 whatever the env emits (e.g. float64).
    obs_dtype = np.dtype(np.float32) if np.issubdtype(obs_space.dtype, np.floating) else np.dtype(obs_space.dtype)
    act_dtype = np.dtype(np.int32) if num_actions is not None else np.dtype(np.float32)
    return EnvironmentSpec(
        observation_space=obs_space,
        action_space=act_space,
        observation_shape=tuple(obs_space.shape),
        observation_dtype=obs_dtype,
        action_shape=tuple(act_space.shape or ()),
        action_dtype=act_dtype,
        num_actions=num_actions,
        num_envs=int(getattr(env, "num_envs", 1)),
    )
