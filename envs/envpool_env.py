"""EnvPool as an env backend: ``envpool:<task>`` ids (``envpool:CartPole-v1``, ``envpool:Pong-v5``,
``envpool:HalfCheetah-v4``, ...; the ``envpool`` extra).

EnvPool steps its envs in C++ threads, without Python's GIL. ``EnvPoolVectorEnv`` gives it
gymnasium's vector-env conventions as Shoal's other envs have them: autoreset is ``SAME_STEP``
(an env whose episode ended returns its next episode's first observation from the same
``step``, the final one in ``info["final_obs"]``), ``terminated`` and ``truncated`` as gymnasium
sets them (the time limit truncates), and Atari tasks run Shoal's Atari protocol (sticky actions
0.25, frames of 4 stacked 84x84 grayscale images ``[4, 84, 84]``, 30 no-ops, fire reset, no
episodic life, unclipped rewards: the training env clips them as for ``ALE/`` ids).
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np

PREFIX = "envpool:"


def is_envpool(env_id: str) -> bool:
    return env_id.startswith(PREFIX)


def _envpool() -> Any:
    """The ``envpool`` module (the envpool extra; a one-line ``ValueError`` naming it if absent)."""
    try:
        import envpool  # lazy: optional extra (envpool)
    except ImportError:
        raise ValueError(
            "envpool: ids need the envpool package: pip install 'shoal[envpool]' "
            "(wheels for Linux x86-64, CPython 3.11 and 3.12)"
        ) from None
    return envpool


def _task_spec(task: str) -> Any:
    """EnvPool's registered spec of ``task`` (its import path, spec class and env classes), or ``None``."""
    return _envpool().registration.registry.specs.get(task)


def task_id(env_id: str) -> str:
    """The EnvPool task of ``envpool:<task>``; a ``ValueError`` naming close matches if EnvPool has none."""
    envpool = _envpool()
    task = env_id[len(PREFIX) :]
    tasks = envpool.list_all_envs()
    if task not in tasks:
        close = difflib.get_close_matches(task, tasks, n=3, cutoff=0.6)
        hint = f"; did you mean {', '.join(repr(PREFIX + c) for c in close)}?" if close else ""
        raise ValueError(
            f'unknown EnvPool task {env_id!r}{hint} (see `python -c "import envpool; print(envpool.list_all_envs())"`)'
        )
    return task


def is_atari_task(task: str) -> bool:
    """Whether ``task`` is one of EnvPool's Atari games (``Pong-v5``)."""
    spec = _task_spec(task)
    return spec is not None and "atari" in str(spec).lower()


def _protocol(task: str, sticky_actions: float) -> dict:
    """EnvPool's settings of Shoal's Atari protocol (``environments.make_atari_vector_env``'s)."""
    if not is_atari_task(task):
        return {}
    return dict(
        repeat_action_probability=sticky_actions,
        frame_skip=4,
        stack_num=4,
        img_height=84,
        img_width=84,
        gray_scale=True,
        noop_max=30,
        use_fire_reset=True,
        episodic_life=False,
        reward_clip=False,
    )


def is_classic_task(task: str) -> bool:
    """Whether ``task`` is one of EnvPool's classic-control tasks (``CartPole-v1``)."""
    spec = _task_spec(task)
    return spec is not None and "classic_control" in str(spec)


def default_threads(task: str, num_envs: int) -> int:
    """EnvPool's threads for ``task``: 1 for a classic-control task (a step of 16 CartPoles takes
    78 us in one thread, 147 us in two: handing the work over costs more than it does), else one
    per core up to ``num_envs`` (8 Pongs: 2.7 ms a step in one thread, 2.2 ms in two, on 2 cores)."""
    spec = _task_spec(task)
    if spec is not None and "classic_control" in str(spec):
        return 1
    return max(1, min(num_envs, os.cpu_count() or 1))


class EnvPoolVectorEnv(gym.vector.VectorEnv):
    """``num_envs`` EnvPool envs of ``task`` (synchronous: every ``step`` steps them all, in
    ``num_threads`` C++ threads, by default ``default_threads``), env ``i`` seeded ``seed + i`` by EnvPool, with gymnasium's
    ``SAME_STEP`` autoreset (module docstring)."""

    metadata = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}

    def __init__(
        self,
        task: str,
        num_envs: int,
        seed: int,
        sticky_actions: float = 0.25,
        env_args: Mapping[str, Any] | None = None,
        num_threads: int | None = None,
    ) -> None:
        envpool = _envpool()
        settings = {**_protocol(task, sticky_actions), **dict(env_args or {})}
        self._pool = envpool.make(
            task,
            env_type="gymnasium",
            num_envs=num_envs,
            seed=seed,
            num_threads=num_threads or default_threads(task, num_envs),
            **settings,
        )
        self.num_envs = num_envs
        self.single_observation_space = self._pool.observation_space
        self.single_action_space = self._pool.action_space
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, num_envs)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, num_envs)
        self.spec = None
        self.task = task
        self._ids = np.arange(num_envs, dtype=np.int32)
        self._dtype = getattr(self.single_action_space, "dtype", None)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """Resets every env (EnvPool seeds its envs once, when made: ``seed`` seeds the action space)."""
        if seed is not None:
            self.action_space.seed(seed)
        observation, info = self._pool.reset(self._ids)
        return observation, _info(info)

    def step(self, actions):
        actions = np.asarray(actions, self._dtype) if self._dtype is not None else actions
        observation, reward, terminated, truncated, info = self._pool.step(actions, self._ids)
        ended = terminated | truncated
        info = _info(info)
        if ended.any():
            ids = ended.nonzero()[0]
            final = np.empty(self.num_envs, object)
            for i in ids:
                final[i] = observation[i].copy()
            observation = observation.copy()
            observation[ids], _ = self._pool.reset(self._ids[ids])  # (same-step: the next episode's first)
            info["final_obs"], info["_final_obs"] = final, ended.copy()
            info["final_info"], info["_final_info"] = {}, ended.copy()
        return observation, np.asarray(reward, np.float64), terminated, truncated, info

    def close_extras(self, **kwargs: Any) -> None:
        self._pool.close() if hasattr(self._pool, "close") else None


def _info(info: dict) -> dict:
    """EnvPool's info without its bookkeeping (``env_id``, ``players``: every env's, each step)."""
    return {k: v for k, v in info.items() if k not in ("env_id", "players")}
