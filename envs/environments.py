"""Gymnasium vector environments, set up the way Shoal's actors expect.

Atari (``ALE/<Game>-v5``, the ``atari`` extra) runs on ale-py's own ``AtariVectorEnv`` (C++
threads, one per env up to the machine's cores) with the published protocol (Machado et al.,
2018, as CleanRL and RL-Zoo report it): 84x84 grayscale frames, a stack of 4, frameskip 4 with
max-pooling, up to 30 no-op starts, FIRE at reset, sticky actions with probability 0.25 (a
setting); episodes are whole games (losing a life ends nothing); training rewards are clipped to
[-1, 1] while the game's own reward is kept for the episode returns, and evaluation envs report
the unclipped score (``env_protocol`` describes it, and the result says so).
"""

from __future__ import annotations

import difflib
import functools
import os
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from shoal.core.importing import import_module_for
from shoal.core.specs import EnvironmentSpec, make_environment_spec
from shoal.envs import memory_tasks
from shoal.envs.env_sources import EnvFactory, check_env_module, make_single_env
from shoal.envs.envpool_env import EnvPoolVectorEnv, is_envpool
from shoal.envs.envpool_env import is_atari_task as envpool_is_atari
from shoal.envs.envpool_env import task_id as envpool_task
from shoal.envs.jax_envs import JaxGymVectorEnv, check_jax_env_id, is_jax_env, make_jax_vector_env
from shoal.envs.multiagent import AgentRows, agent_rows, env_maker, is_pettingzoo
from shoal.envs.observations import adapt_env
from shoal.envs.selfplay import SelfPlayRows


def resolve_env_id(env_id: str) -> str:
    """The registered id of ``env_id``: ``module:EnvId`` imports ``module`` (where a custom env
    registers itself) and gives ``EnvId``. Raises a ``ValueError`` naming close matches if the
    id is not registered, or one line naming the accepted forms if it is neither ``EnvId`` nor
    ``module:EnvId`` (an empty part, a relative module, a second colon)."""
    if is_jax_env(env_id):  # (gymnax:<Id>: a JAX env, for the compiled loop; shoal.envs.jax_envs)
        check_jax_env_id(env_id)
        return env_id
    if is_pettingzoo(env_id):
        env_maker(env_id)  # (imports it, or one line)
        return env_id
    if is_envpool(env_id):
        envpool_task(env_id)  # (or one line)
        return env_id
    if ":" in env_id:
        module, _, name = env_id.partition(":")
        if not module or not name or ":" in name or module.startswith(".") or "" in module.split("."):
            raise ValueError(
                f"environment id {env_id!r} is neither EnvId nor module:EnvId (e.g. CartPole-v1, "
                "or my_package.envs:MyEnv-v0 to import my_package.envs, which registers MyEnv-v0)"
            )
        check_env_module(module, f"environment {env_id!r}")  # (before it is imported)
        import_module_for(module, f"environment {env_id!r}")
        env_id = name
    check_env_id(env_id)
    return env_id


def check_env_id(env_id: str) -> None:
    """Raises a ``ValueError`` naming close matches if ``env_id`` is not registered."""
    if is_jax_env(env_id):
        check_jax_env_id(env_id)
        return
    if is_pettingzoo(env_id):
        env_maker(env_id)
        return
    if is_envpool(env_id):
        envpool_task(env_id)
        return
    if ":" in env_id:
        resolve_env_id(env_id)
        return
    if is_atari(env_id):
        _import_ale(env_id)
    if env_id.startswith(MINATAR_PREFIX):
        _register_minatar(env_id)
    if env_id.startswith(memory_tasks.NAMESPACE):
        memory_tasks.register()
    if env_id.startswith(POPGYM_PREFIX):
        _register_popgym(env_id)
    if env_id in gym.registry:
        return
    close = difflib.get_close_matches(env_id, list(gym.registry), n=3, cutoff=0.6)
    hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    raise ValueError(
        f"unknown gymnasium environment id {env_id!r}{hint} "
        '(see `python -c "import gymnasium; gymnasium.pprint_registry()"`)'
    )


# gymnasium env families that need an optional dependency, and the Shoal extra that installs it
EXTRAS = {"gymnasium.envs.box2d": "box2d", "gymnasium.envs.mujoco": "mujoco"}


def _missing_extra(env_id: str, error: Exception) -> ValueError:
    entry_point = str(gym.spec(env_id).entry_point)
    extra = next((name for prefix, name in EXTRAS.items() if entry_point.startswith(prefix)), None)
    if extra is None:
        return ValueError(f"{env_id} needs a package that is not installed: {error}")
    return ValueError(
        f"{env_id} needs the '{extra}' extra, which is not installed; run "
        f"pip install -e '.[{extra}]' (from the Shoal repository)"
    )


ATARI_PREFIX = "ALE/"
STICKY_ACTIONS = 0.25  # Machado et al. (2018)


def _import_ale(env_id: str) -> None:
    try:
        import ale_py  # noqa: F401 -- lazy: optional extra (atari); registers the ALE/ ids with gymnasium
    except ImportError:
        raise ValueError(
            f"{env_id} needs the 'atari' extra, which is not installed; run "
            "pip install -e '.[atari]' (from the Shoal repository)"
        ) from None


MINATAR_PREFIX = "MinAtar/"


def _register_minatar(env_id: str) -> None:
    """Registers MinAtar's ids (``MinAtar/Breakout-v1``, ...). Its wheel declares them through
    gymnasium's plugin entry point, which gymnasium 1.x no longer reads, so they are registered
    here, once, when a ``MinAtar/`` id is first asked for."""
    if any(name.startswith(MINATAR_PREFIX) for name in gym.registry):
        return
    try:
        import minatar.gym  # lazy: optional extra (minatar)
    except ImportError:
        raise ValueError(
            f"{env_id} needs the 'minatar' extra, which is not installed; run "
            "pip install -e '.[minatar]' (from the Shoal repository)"
        ) from None
    minatar.gym.register_envs()


POPGYM_PREFIX = "popgym-"


def _register_popgym(env_id: str) -> None:
    """Registers popgym's ids (``popgym-RepeatPreviousEasy-v0``, ...): importing popgym does."""
    try:
        import popgym  # noqa: F401 -- lazy: optional extra (popgym); registers the popgym- ids
    except ImportError:
        raise ValueError(
            f"{env_id} needs the 'popgym' extra, which is not installed; run "
            "pip install -e '.[popgym]' (from the Shoal repository)"
        ) from None


def is_atari(env_id: str) -> bool:
    return env_id.startswith(ATARI_PREFIX)


def env_protocol(env_id: str, sticky_actions: float = STICKY_ACTIONS) -> dict | None:
    """How ``env_id`` is run, where it matters for comparing results (Atari), else ``None``."""
    if not is_atari(env_id):
        return None
    return {
        "name": "Machado et al. (2018)",
        "sticky_actions": sticky_actions,
        "frame_skip": 4,
        "frames": "stack of 4, 84x84 grayscale, max-pooled",
        "noop_max": 30,
        "full_action_space": False,
        "max_frames_per_episode": 108_000,
        "training_rewards": "clipped to [-1, 1]",
        "evaluation": "whole games (a lost life ends nothing), unclipped scores",
    }


def _atari_game(env_id: str) -> str:
    """``ALE/MsPacman-v5`` -> ``ms_pacman`` (ale-py's ROM id)."""
    name = env_id[len(ATARI_PREFIX) :].rsplit("-v", 1)[0]
    return "".join(f"_{c.lower()}" if c.isupper() and i else c.lower() for i, c in enumerate(name))


class ClipTrainingRewards(gym.vector.VectorWrapper):
    """Rewards clipped to [-1, 1] (what an agent trains on); the game's own reward stays in
    ``info["game_reward"]`` (what episode returns count)."""

    def step(self, actions):
        obs, reward, terminated, truncated, info = self.env.step(actions)
        info = {**info, "game_reward": reward}
        return obs, np.clip(reward, -1.0, 1.0).astype(np.float32), terminated, truncated, info


def make_atari_vector_env(
    env_id: str,
    num_envs: int,
    seed: int,
    sticky_actions: float = STICKY_ACTIONS,
    env_args: Mapping[str, Any] | None = None,
) -> gym.vector.VectorEnv:
    """ale-py's ``AtariVectorEnv`` with the protocol in the module docstring (unclipped rewards;
    ``env_args`` override its settings)."""
    check_env_id(env_id)  # (imports ale-py, or names the extra)
    from ale_py.vector_env import AtariVectorEnv  # lazy: optional extra (atari)

    protocol = dict(
        repeat_action_probability=sticky_actions,
        frameskip=4,
        stack_num=4,
        img_height=84,
        img_width=84,
        grayscale=True,
        maxpool=True,
        noop_max=30,
        use_fire_reset=True,
        episodic_life=False,
        reward_clipping=False,
        autoreset_mode="SameStep",
    )
    try:
        env = AtariVectorEnv(
            _atari_game(env_id),
            num_envs,
            num_threads=min(num_envs, os.cpu_count() or 1),
            **{**protocol, **(env_args or {})},
        )
    except TypeError as e:
        raise ValueError(f"{env_id} with arguments {dict(env_args or {})}: {e}") from None
    env.reset(seed=seed)
    env.action_space.seed(seed)
    return env


def make_vector_env(
    env_id: str,
    num_envs: int,
    seed: int,
    *,
    sticky_actions: float = STICKY_ACTIONS,
    evaluation: bool = False,
    clip_rewards: bool | None = None,
    env_args: Mapping[str, Any] | None = None,
    env_factory: str | EnvFactory | None = None,
    action_masks: bool = True,
    agent_ids: bool = True,
    global_state: bool = False,
    self_play: bool = False,
) -> gym.vector.VectorEnv:
    """A vector env of ``num_envs`` copies, reset with seeds ``seed, seed+1, ...``.

    Autoreset is ``SAME_STEP``: when an env's episode ends, ``step`` already returns the first
    observation of its next episode and puts the final one in ``info["final_obs"]``, so every
    step returned is a real transition (no dummy reset steps to skip). Atari ids get
    ``make_atari_vector_env`` (``sticky_actions``); others a synchronous gymnasium vector env.
    A training env (not ``evaluation``) clips its rewards to [-1, 1] where ``clip_rewards``
    says so (``None``: for Atari, as its protocol does). ``env_args`` go to each env's
    constructor (to ``AtariVectorEnv`` for Atari); an ``env_factory`` (``shoal.envs.env_sources``)
    makes each env instead of ``env_id``'s registration. Every env but Atari's is adapted
    (``shoal.envs.observations.adapt_env``): Discrete observations one-hot, action masks into
    the observation (or dropped, without ``action_masks``). A PettingZoo env (``pettingzoo:...``)
    is ``num_envs`` copies of it, a row per agent (``shoal.envs.multiagent.AgentRows``; each
    row's identity in its observation where ``agent_ids``, the env's global state where ``global_state``);
    with ``self_play``, a two-player turn-based game's copies, a row per copy: the learner's seat,
    against the snapshot pool, or for ``evaluation`` a lookahead player (``shoal.envs.selfplay``).
    """
    if num_envs < 1:
        raise ValueError(f"num_envs must be >= 1, got {num_envs}")
    if is_jax_env(env_id) and env_factory is None:  # (through actors and replay: one jitted step of all envs)
        venv = make_jax_vector_env(env_id, env_args, num_envs, agent_ids, global_state)  # (JaxMARL's: rows)
        jax_env = JaxGymVectorEnv(venv.env, venv.params, num_envs, venv)
        jax_env.reset(seed=seed)
        return jax_env
    env: gym.vector.VectorEnv
    if is_pettingzoo(env_id) and env_factory is None and self_play:
        env = SelfPlayRows(
            env_maker(env_id, env_args, turns=True), num_envs, seed, "lookahead" if evaluation else "pool", env_id
        )
        env.reset(seed=seed)
        env.action_space.seed(seed)
    elif is_envpool(env_id) and env_factory is None:  # (EnvPool: its own Atari protocol, same-step autoreset)
        env = EnvPoolVectorEnv(envpool_task(env_id), num_envs, seed, sticky_actions, env_args)
        env.reset(seed=seed)
    elif is_pettingzoo(env_id) and env_factory is None:
        env = agent_rows(env_id, num_envs, seed, env_args, agent_ids, global_state)
        env.action_space.seed(seed)
    elif env_factory is not None or (env_args and not is_atari(env_id)):
        make = functools.partial(
            _adapted_env, resolve_env_id(env_id) if env_factory is None else env_id, env_args, env_factory, action_masks
        )
        env = gym.vector.SyncVectorEnv([make] * num_envs, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
        env.reset(seed=seed)
        env.action_space.seed(seed)
    elif is_atari(env_id):
        env = make_atari_vector_env(env_id, num_envs, seed, sticky_actions, env_args)
    else:
        env_id = resolve_env_id(env_id)
        try:
            env = gym.make_vec(
                env_id,
                num_envs=num_envs,
                vectorization_mode="sync",
                # (adapt_env may return the env itself, unwrapped: gymnasium takes any callable)
                wrappers=[functools.partial(adapt_env, action_masks=action_masks)],  # type: ignore[list-item]
                vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP},
            )
        except gym.error.DependencyNotInstalled as e:
            raise _missing_extra(env_id, e) from None
        env.reset(seed=seed)
        env.action_space.seed(seed)
    atari = is_atari(env_id) or (isinstance(env, EnvPoolVectorEnv) and envpool_is_atari(env.task))
    if not evaluation and (clip_rewards if clip_rewards is not None else atari):
        env = ClipTrainingRewards(env)
    return env


def _adapted_env(
    env_id: str, env_args: Mapping[str, Any] | None, env_factory: str | EnvFactory | None, action_masks: bool
) -> gym.Env:
    return adapt_env(make_single_env(env_id, env_args, env_factory), action_masks)


def environment_spec(
    env_id: str,
    num_envs: int,
    env_args: Mapping[str, Any] | None = None,
    env_factory: str | EnvFactory | None = None,
    action_masks: bool = True,
    agent_ids: bool = True,
    global_state: bool = False,
    self_play: bool = False,
) -> EnvironmentSpec:
    """The spec of ``make_vector_env(env_id, num_envs, ...)``, read off one single env that is
    built and closed, never stepped (no vector env, no Atari threads; reset once by ``adapt_env``,
    to see whether its info holds an action mask): what a process
    that steps no env (a distributed run's driver) reads once and hands to its nodes. Atari's
    frames are the protocol's (a stack of 4 84x84 grayscale frames); its actions the game's
    minimal set, as ``AtariVectorEnv`` has them (with ``env_args``, one 1-env ``AtariVectorEnv``
    is read instead: they may change the frames)."""
    if num_envs < 1:
        raise ValueError(f"num_envs must be >= 1, got {num_envs}")
    if is_jax_env(env_id) and env_factory is None:  # (the compiled loop's env: its params read, never stepped)
        return make_jax_vector_env(env_id, env_args, num_envs, agent_ids, global_state).spec
    if is_pettingzoo(env_id) and env_factory is None and self_play:  # (a row per copy: the learner's seat)
        game = SelfPlayRows(env_maker(env_id, env_args, turns=True), 1, 0, name=env_id)
        try:
            return make_environment_spec(_Spaces(game.single_observation_space, game.single_action_space), num_envs)
        finally:
            game.close()
    if is_envpool(env_id) and env_factory is None:  # (one 1-env pool, read and closed)
        pool = EnvPoolVectorEnv(envpool_task(env_id), 1, 0, env_args=env_args)
        try:
            return make_environment_spec(_Spaces(pool.single_observation_space, pool.single_action_space), num_envs)
        finally:
            pool.close()
    if is_pettingzoo(env_id) and env_factory is None:  # (rows: num_envs copies of every agent)
        rows = AgentRows(env_maker(env_id, env_args), 1, 0, agent_ids, name=env_id, global_state=global_state)
        try:
            spaces = _Spaces(rows.single_observation_space, rows.single_action_space)
            return make_environment_spec(spaces, num_envs * rows.num_envs)
        finally:
            rows.close()
    env: Any  # (a single env, or Atari's 1-env vector env)
    if env_factory is not None or (env_args and not is_atari(env_id)):
        env = _adapted_env(
            resolve_env_id(env_id) if env_factory is None else env_id, env_args, env_factory, action_masks
        )
        observation_space = env.observation_space
    elif is_atari(env_id) and env_args:
        env = make_atari_vector_env(env_id, 1, 0, env_args=env_args)
        observation_space = env.single_observation_space
    elif is_atari(env_id):
        check_env_id(env_id)
        env = gym.make(env_id, full_action_space=False)
        observation_space = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    else:
        env_id = resolve_env_id(env_id)
        try:
            env = adapt_env(gym.make(env_id), action_masks)
        except gym.error.DependencyNotInstalled as e:
            raise _missing_extra(env_id, e) from None
        observation_space = env.observation_space
    try:
        action_space = getattr(env, "single_action_space", env.action_space)
        return make_environment_spec(_Spaces(observation_space, action_space), num_envs)
    finally:
        env.close()


class _Spaces:
    """Two spaces, read as an env's (``make_environment_spec`` of a single env)."""

    def __init__(self, observation_space: gym.Space, action_space: gym.Space) -> None:
        self.observation_space, self.action_space = observation_space, action_space


def final_observations(next_obs, terminated, truncated, info):
    """The observation that followed each env's action: the final one where an episode ended
    (``next_obs`` an array, or a dict of arrays for a Dict observation)."""
    ended = terminated | truncated
    if not ended.any():
        return next_obs
    if isinstance(next_obs, dict):
        final = {key: value.copy() for key, value in next_obs.items()}
        for i in ended.nonzero()[0]:
            for key in final:
                final[key][i] = info["final_obs"][i][key]
        return final
    final = next_obs.copy()
    for i in ended.nonzero()[0]:
        final[i] = info["final_obs"][i]
    return final


def action_clipper(env: gym.vector.VectorEnv):
    """``actions -> actions`` for ``env.step``: clipped to the bounds of a Box action space (a
    Gaussian policy samples unbounded actions; the step records what it sampled); otherwise of
    the space's dtype (a policy's int32 actions as a Discrete space's int64: CartPole's check of
    an int32 action costs 7 us an env), or unchanged where the space has none (a Dict)."""
    space = getattr(env, "single_action_space", env.action_space)
    if not isinstance(space, gym.spaces.Box):
        dtype = space.dtype
        if dtype is None:
            return lambda actions: actions
        return lambda actions: np.asarray(actions, dtype)
    low, high = space.low, space.high
    return lambda actions: np.clip(actions, low, high)
