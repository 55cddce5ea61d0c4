"""What Shoal does to an env's observations before its agents see them (``adapt_env``, applied
to every env ``make_vector_env`` builds, Atari's excepted), and the actors' check of masks.

* A ``Discrete(n)`` observation (or a Discrete entry of a Dict) becomes a one-hot float32
  vector of ``n`` (``OneHotObservation``; e.g. Taxi's 500 states), and a 1-d
  ``MultiDiscrete(nvec)`` one the one-hot vectors of its entries side by side (``sum(nvec)``;
  e.g. popgym's CountRecall).
* A rank-3 boolean ``Box`` observation (binary feature planes, gymnasium's channels-last
  ``[H, W, C]``: MinAtar's 10x10 games) becomes uint8 ``[C, H, W]`` in {0, 1}
  (``BinaryPlanes``): the channels-first frames Shoal's convolutional torsos take, as
  compact in replay as the booleans.
* An env that gives ``info["action_mask"]`` (gymnasium's convention, e.g. Taxi) gets it moved
  into its observation (``InfoActionMask``): ``{"observation": obs, "action_mask": mask}`` (or,
  for a Dict observation, one more key), so the mask is stored in replay with every observation
  and next observation. A Dict observation with an ``action_mask`` key (PettingZoo's and
  SB3-contrib's convention) already has it.
* A mask, from the info or a Dict key, is stored as int8 0/1 (``allowed_actions``): non-zero
  (``0.5``, ``256``, ``True``) is allowed, zero is not, whatever its dtype; a cast instead
  (``int8(256) == 0``, ``int8(0.5) == 0``) would read an allowed action as masked.
* With ``action_masks=False``, masks are left out instead: the info's is not moved, and an
  ``action_mask`` key is dropped (``DropActionMask``): the agent acts on every action.

Whether an env gives ``info["action_mask"]`` is read off one ``reset()`` of it (an env's first
reset; the vector env resets it again with the run's seed). A mask must have one entry per
action (non-zero: allowed), else one line is raised where it is first seen; a state with no
allowed action stops the run (``check_action_mask``).
"""

from __future__ import annotations

from typing import Any, cast

import gymnasium as gym
import numpy as np

from shoal.core.specs import ACTION_MASK


def _is_categorical(space: gym.Space) -> bool:
    return isinstance(space, gym.spaces.Discrete) or (
        isinstance(space, gym.spaces.MultiDiscrete) and len(space.nvec.shape) == 1
    )


def _one_hot_space(space: gym.Space) -> gym.Space:
    if isinstance(space, gym.spaces.Discrete):
        return gym.spaces.Box(0.0, 1.0, (int(space.n),), np.float32)
    if isinstance(space, gym.spaces.MultiDiscrete) and len(space.nvec.shape) == 1:
        return gym.spaces.Box(0.0, 1.0, (int(space.nvec.sum()),), np.float32)
    if isinstance(space, gym.spaces.Dict):
        return gym.spaces.Dict({k: _one_hot_space(s) for k, s in space.spaces.items()})
    return space


def _has_discrete(space: gym.Space) -> bool:
    if isinstance(space, gym.spaces.Dict):
        return any(_is_categorical(s) for s in space.spaces.values())
    return _is_categorical(space)


class OneHotObservation(gym.ObservationWrapper):
    """``Discrete(n)`` observations (also as entries of a Dict) -> one-hot float32 ``[n]``
    (index ``obs - start``); a 1-d ``MultiDiscrete(nvec)`` -> its entries' one-hots
    concatenated, ``[sum(nvec)]``."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self._source = env.observation_space
        self.observation_space = _one_hot_space(env.observation_space)

    def observation(self, observation: Any) -> Any:
        return self._encode(self._source, observation)

    def _encode(self, space: gym.Space, value: Any) -> Any:
        if isinstance(space, gym.spaces.Discrete):
            one_hot = np.zeros(int(space.n), np.float32)
            one_hot[int(value) - int(space.start)] = 1.0
            return one_hot
        if isinstance(space, gym.spaces.MultiDiscrete):
            offsets = np.concatenate([[0], np.cumsum(space.nvec)[:-1]])
            one_hot = np.zeros(int(space.nvec.sum()), np.float32)
            one_hot[offsets + np.asarray(value) - space.start] = 1.0
            return one_hot
        if isinstance(space, gym.spaces.Dict):
            return {k: self._encode(s, value[k]) for k, s in space.spaces.items()}
        return value


def _is_binary_planes(space: gym.Space) -> bool:
    return isinstance(space, gym.spaces.Box) and space.dtype == np.bool_ and len(space.shape) == 3


class BinaryPlanes(gym.ObservationWrapper):
    """Boolean ``[H, W, C]`` observations -> uint8 ``[C, H, W]`` in {0, 1}."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        h, w, c = cast(tuple[int, int, int], env.observation_space.shape)
        self.observation_space = gym.spaces.Box(0, 1, (c, h, w), np.uint8)

    def observation(self, observation: Any) -> np.ndarray:
        return np.ascontiguousarray(np.transpose(np.asarray(observation, np.uint8), (2, 0, 1)))


def allowed_actions(mask: Any) -> np.ndarray:
    """``mask`` as Shoal stores masks: int8, 1 where it is non-zero (allowed), 0 where it is zero."""
    return (np.asarray(mask) != 0).astype(np.int8)


def _mask(info: dict, num_actions: int) -> np.ndarray:
    mask = np.asarray(info[ACTION_MASK])
    if mask.shape != (num_actions,):
        raise ValueError(
            f"the environment's info['action_mask'] has shape {mask.shape}; it must have one "
            f"entry per action, ({num_actions},)"
        )
    return allowed_actions(mask)


class InfoActionMask(gym.Wrapper):
    """Moves ``info["action_mask"]`` (one entry per discrete action, non-zero: allowed) into the
    observation: ``{"observation": obs, "action_mask": int8 [n]}``, or one more key of a Dict
    observation. (The info keeps its copy.)"""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        if not isinstance(env.action_space, gym.spaces.Discrete):
            raise ValueError(
                f"the environment gives info['action_mask'], but its action space {env.action_space} "
                "is not Discrete (action masks are for discrete actions)"
            )
        self._n = int(env.action_space.n)
        mask_space = gym.spaces.Box(0, 1, (self._n,), np.int8)
        inner = env.observation_space
        spaces = dict(inner.spaces) if isinstance(inner, gym.spaces.Dict) else {"observation": inner}
        self.observation_space = gym.spaces.Dict({**spaces, ACTION_MASK: mask_space})

    def _observe(self, observation: Any, info: dict) -> dict:
        if ACTION_MASK not in info:
            raise ValueError("the environment gave info['action_mask'] at its first reset but not since")
        fields = dict(observation) if isinstance(observation, dict) else {"observation": observation}
        return {**fields, ACTION_MASK: _mask(info, self._n)}

    def reset(self, **kwargs):
        observation, info = self.env.reset(**kwargs)
        return self._observe(observation, info), info

    def step(self, action):
        observation, reward, terminated, truncated, info = self.env.step(action)
        return self._observe(observation, info), reward, terminated, truncated, info


class ActionMaskKey(gym.ObservationWrapper):
    """A Dict observation's ``action_mask`` key as int8 0/1 (``allowed_actions``: non-zero is
    allowed), whatever the env gives (``[256, 0]`` in an int64 array, ``[0.5, 0]`` as floats)."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        spaces = dict(cast(gym.spaces.Dict, env.observation_space).spaces)
        spaces[ACTION_MASK] = gym.spaces.Box(0, 1, spaces[ACTION_MASK].shape, np.int8)
        self.observation_space = gym.spaces.Dict(spaces)

    def observation(self, observation: dict) -> dict:
        return {**observation, ACTION_MASK: allowed_actions(observation[ACTION_MASK])}


class DropActionMask(gym.ObservationWrapper):
    """A Dict observation without its ``action_mask`` key (the agent acts on every action)."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.observation_space = gym.spaces.Dict(
            {k: s for k, s in cast(gym.spaces.Dict, env.observation_space).spaces.items() if k != ACTION_MASK}
        )

    def observation(self, observation: dict) -> dict:
        return {k: v for k, v in observation.items() if k != ACTION_MASK}


def adapt_env(env: gym.Env, action_masks: bool = True) -> gym.Env:
    """``env`` as Shoal's agents take it (module docstring): Discrete observations one-hot,
    boolean planes as uint8 frames, and action masks in the observation (or, without ``action_masks``, dropped)."""
    space = env.observation_space
    if _has_discrete(space):
        env = OneHotObservation(env)
    if _is_binary_planes(space):
        env = BinaryPlanes(env)
    has_key = isinstance(space, gym.spaces.Dict) and ACTION_MASK in space.spaces
    if has_key and not action_masks:
        return DropActionMask(env)
    if has_key and isinstance(
        cast(gym.spaces.Dict, space).spaces[ACTION_MASK], (gym.spaces.Box, gym.spaces.MultiBinary)
    ):
        return ActionMaskKey(env)  # (other spaces: refused by the spec, in one line)
    if action_masks and not has_key:
        _, info = env.reset()  # (does the env give info masks? the vector env reseeds it)
        if ACTION_MASK in info:
            env = InfoActionMask(env)
            _mask(info, int(cast(gym.spaces.Discrete, env.action_space).n))  # (a wrong shape: raised now)
    return env


def check_action_mask(observation: Any, env_steps: int, action_space: gym.Space | None = None) -> None:
    """Raises ``RuntimeError`` (one line) if the ``action_mask`` of a batch of observations
    ``[num_envs, ...]`` allows no action in some env. (A mask of continuous actions, where
    ``action_space`` is a ``Box``, names the entries in use: none in use is a valid row, e.g. an
    agent absent from its episode, ``shoal.envs.multiagent``.)"""
    if not isinstance(observation, dict) or ACTION_MASK not in observation or isinstance(action_space, gym.spaces.Box):
        return
    allowed = np.asarray(observation[ACTION_MASK]).any(axis=-1)
    if not allowed.all():
        raise RuntimeError(
            f"the environment's action_mask allows no action at step {env_steps} "
            f"(envs {np.nonzero(~allowed)[0].tolist()})"
        )
