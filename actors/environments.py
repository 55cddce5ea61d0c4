"""Gymnasium vector environments, set up the way Shoal's actors expect."""

from __future__ import annotations

import difflib
import importlib

import gymnasium as gym
import numpy as np


def resolve_env_id(env_id: str) -> str:
    """The registered id of ``env_id``: ``module:EnvId`` imports ``module`` (where a custom env
    registers itself) and gives ``EnvId``. Raises a ``ValueError`` naming close matches if the
    id is not registered."""
    if ":" in env_id:
        module, _, name = env_id.partition(":")
        try:
            importlib.import_module(module)
        except ImportError as e:
            raise ValueError(f"cannot import {module!r} for environment {env_id!r}: {e}") from None
        env_id = name
    check_env_id(env_id)
    return env_id


def check_env_id(env_id: str) -> None:
    """Raises a ``ValueError`` naming close matches if ``env_id`` is not registered."""
    if ":" in env_id:
        resolve_env_id(env_id)
        return
    if env_id in gym.registry:
        return
    close = difflib.get_close_matches(env_id, list(gym.registry), n=3, cutoff=0.6)
    hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    raise ValueError(f"unknown gymnasium environment id {env_id!r}{hint} "
                     "(see `python -c \"import gymnasium; gymnasium.pprint_registry()\"`)")


# gymnasium env families that need an optional dependency, and the Shoal extra that installs it
EXTRAS = {"gymnasium.envs.box2d": "box2d", "gymnasium.envs.mujoco": "mujoco"}


def _missing_extra(env_id: str, error: Exception) -> ValueError:
    entry_point = str(gym.spec(env_id).entry_point)
    extra = next((name for prefix, name in EXTRAS.items() if entry_point.startswith(prefix)), None)
    if extra is None:
        return ValueError(f"{env_id} needs a package that is not installed: {error}")
    return ValueError(f"{env_id} needs the '{extra}' extra, which is not installed; run "
                      f"pip install -e '.[{extra}]' (from the Shoal repository)")


def make_vector_env(env_id: str, num_envs: int, seed: int) -> gym.vector.VectorEnv:
    """A synchronous vector env of ``num_envs`` copies, reset with seeds ``seed, seed+1, ...``.

    Autoreset is ``SAME_STEP``: when an env's episode ends, ``step`` already returns the first
    observation of its next episode and puts the final one in ``info["final_obs"]``, so every
    step returned is a real transition (no dummy reset steps to skip).
    """
    env_id = resolve_env_id(env_id)
    if num_envs < 1:
        raise ValueError(f"num_envs must be >= 1, got {num_envs}")
    try:
        env = gym.make_vec(env_id, num_envs=num_envs, vectorization_mode="sync",
                           vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP})
    except gym.error.DependencyNotInstalled as e:
        raise _missing_extra(env_id, e) from None
    env.reset(seed=seed)
    env.action_space.seed(seed)
    return env


def final_observations(next_obs, terminated, truncated, info):
    """The observation that followed each env's action: the final one where an episode ended."""
    ended = terminated | truncated
    if not ended.any():
        return next_obs
    final = next_obs.copy()
    for i in ended.nonzero()[0]:
        final[i] = info["final_obs"][i]
    return final


def action_clipper(env: gym.vector.VectorEnv):
    """``actions -> actions`` for ``env.step``: clipped to the bounds of a Box action space (a
    Gaussian policy samples unbounded actions; the step records what it sampled), unchanged
    otherwise."""
    space = getattr(env, "single_action_space", env.action_space)
    if not isinstance(space, gym.spaces.Box):
        return lambda actions: actions
    low, high = space.low, space.high
    return lambda actions: np.clip(actions, low, high)
