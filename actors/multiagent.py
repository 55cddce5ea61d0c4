"""PettingZoo environments as vector envs: one row per (env copy, agent) pair.

``--env pettingzoo:<module>`` names a module with PettingZoo's ``parallel_env(**kwargs)`` (its
parallel API; e.g. ``pettingzoo:mpe2.simple_spread_v3``) or ``env(**kwargs)`` (its AEC API,
converted with PettingZoo's ``aec_to_parallel`` where the env allows it), and
``pettingzoo:<module>:<function>`` a function of the user's that returns either. ``--env-arg``
values go to that constructor.

``AgentRows`` steps ``num_copies`` copies of the env together and lays every copy's agents out as
rows, copy by copy, agents in ``possible_agents`` order: ``num_copies * num_agents`` rows, so
the actor, the adders and replay see a batched single-agent env and one policy acts for every
agent (parameters shared). Each row is one agent's view:

* its **observation**, with the agent's identity appended (``agent_ids``, on by default: a
  one-hot of its index, so that a shared policy can act differently per agent): concatenated to
  a rank-1 Box observation, or as an ``agent_id`` key of a Dict one (``{"observation": ...,
  "agent_id": ...}`` for any other Box). An ``action_mask`` (a Dict key, PettingZoo's
  convention, or ``info["action_mask"]``) stays in, or moves into, the observation, as
  single-agent envs have it (``shoal.actors.observations``);
* its **reward**, **termination** and **truncation**; when every agent of a copy is done, the
  copy resets in the same step (gymnasium's ``SAME_STEP`` autoreset: ``info["final_obs"]``
  holds each row's final observation).

**Agents that leave early** (dead agents) or join late: an agent that is done while others play
on ends its row there (its termination or truncation, its last observation in ``final_obs``);
until it plays again (its copy's next episode) its row is *absent*: a zero observation with its
identity, reward 0, never ending, and where actions are masked only action 0 allowed. Its
actions are never sent to the env. (The learner trains on absent steps as on any other: their
value is learnt as 0; with a mask their one allowed action carries no policy gradient.)

Every agent must have the same observation and action spaces: one policy acts for all.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from typing import Any, Callable, Mapping

import gymnasium as gym
import numpy as np

from shoal.actors.observations import allowed_actions
from shoal.core.specs import ACTION_MASK

PREFIX = "pettingzoo:"
AGENT_ID = "agent_id"


def is_pettingzoo(env_id: Any) -> bool:
    """Whether ``env_id`` names a PettingZoo env (``pettingzoo:<module>[:<function>]``)."""
    return isinstance(env_id, str) and env_id.startswith(PREFIX)


def _constructor(env_id: str) -> Callable[..., Any]:
    """The constructor a ``pettingzoo:`` id names; one-line ``ValueError`` if bad."""
    target = env_id[len(PREFIX):]
    module_name, _, function = target.partition(":")
    if not module_name or ":" in function or module_name.startswith("."):
        raise ValueError(f"environment id {env_id!r} is neither pettingzoo:<module> (e.g. "
                         "pettingzoo:mpe2.simple_spread_v3) nor pettingzoo:<module>:<function>")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ValueError(f"environment {env_id!r}: cannot import {module_name} ({e}); PettingZoo's own "
                         "envs need the pettingzoo extra: pip install 'shoal[pettingzoo]'") from None
    if function:
        make = getattr(module, function, None)
        if not callable(make):
            raise ValueError(f"environment {env_id!r}: {module_name} has no function {function!r}")
        return make  # (the env it makes says which API it has)
    if callable(getattr(module, "parallel_env", None)):
        return module.parallel_env
    if callable(getattr(module, "env", None)):
        return module.env
    raise ValueError(f"environment {env_id!r}: {module_name} has neither parallel_env() nor env() "
                     "(PettingZoo's parallel and AEC constructors)")


def _as_parallel(env: Any, env_id: str) -> Any:
    """``env`` as a PettingZoo parallel env (an AEC env converted), or a one-line ``ValueError``."""
    from pettingzoo.utils.env import AECEnv, ParallelEnv

    if isinstance(env, ParallelEnv) or (hasattr(env, "possible_agents") and hasattr(env, "step")
                                        and not isinstance(env, AECEnv)):
        return env
    if isinstance(env, AECEnv):
        from pettingzoo.utils.conversions import aec_to_parallel

        try:
            return aec_to_parallel(env)
        except AssertionError as e:  # (PettingZoo refuses envs whose agents act in turns)
            env.close()
            reason = " ".join(str(e).split())
            raise ValueError(f"environment {env_id!r} is an AEC env that cannot be converted to the parallel "
                             f"API ({reason[:160]}); turn-based games are not supported yet") from None
    raise ValueError(f"environment {env_id!r} made a {type(env).__name__}, not a PettingZoo env "
                     "(pettingzoo.ParallelEnv or AECEnv)")


def env_maker(env_id: str, env_args: Mapping[str, Any] | None = None) -> Callable[[], Any]:
    """A function that makes one parallel env of ``env_id`` with ``env_args`` (checked now:
    unknown keyword arguments are refused in one line)."""
    make = _constructor(env_id)
    env_args = dict(env_args or {})
    try:
        parameters = inspect.signature(make).parameters
    except (TypeError, ValueError):
        parameters = {}
    if parameters and not any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
        unknown = sorted(set(env_args) - set(parameters))
        if unknown:
            raise ValueError(f"environment {env_id!r} takes no argument(s) {', '.join(unknown)}; it takes: "
                             f"{', '.join(parameters) or 'none'}")

    return functools.partial(_make, make, env_id, env_args)


def _make(make: Callable[..., Any], env_id: str, env_args: Mapping[str, Any]) -> Any:
    return _as_parallel(make(**env_args), env_id)


def _one_hot(index: int, size: int) -> np.ndarray:
    out = np.zeros(size, np.float32)
    out[index] = 1.0
    return out


class AgentRows(gym.vector.VectorEnv):
    """``num_copies`` copies of a PettingZoo parallel env (``make()`` each), one row per (copy,
    agent) pair; see the module docstring. ``seed``: copy ``i`` resets with ``seed + i``."""

    def __init__(self, make: Callable[[], Any], num_copies: int, seed: int | None = None,
                 agent_ids: bool = True, name: str = "the PettingZoo env") -> None:
        if num_copies < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_copies}")
        self.name = name
        self.envs = [make() for _ in range(num_copies)]
        first = self.envs[0]
        self.agents = list(first.possible_agents)
        if not self.agents:
            raise ValueError(f"{name} has no agents (possible_agents is empty)")
        obs_spaces = {a: first.observation_space(a) for a in self.agents}
        act_spaces = {a: first.action_space(a) for a in self.agents}
        for spaces, what in ((obs_spaces, "observation"), (act_spaces, "action")):
            other = next((a for a in self.agents if spaces[a] != spaces[self.agents[0]]), None)
            if other is not None:
                raise ValueError(f"{name}: agents {self.agents[0]} and {other} have different {what} spaces "
                                 f"({spaces[self.agents[0]]} and {spaces[other]}); one policy acts for every "
                                 "agent, so their spaces must be the same")
        self._ids = agent_ids and len(self.agents) > 1
        self._inner = obs_spaces[self.agents[0]]
        observations, infos = first.reset(seed=seed)
        self._info_mask = any(ACTION_MASK in (infos.get(a) or {}) for a in self.agents) and not (
            isinstance(self._inner, gym.spaces.Dict) and ACTION_MASK in self._inner.spaces)
        self.single_observation_space = self._space()
        self.single_action_space = act_spaces[self.agents[0]]
        self.num_envs = num_copies * len(self.agents)
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, self.num_envs)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, self.num_envs)
        self.metadata = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}
        self.render_mode = None
        self._seed = seed
        self._obs: list[Any] = []

    # -- spaces and observations -----------------------------------------------------------------
    def _space(self) -> gym.Space:
        inner, n = self._inner, len(self.agents)
        mask_space = None
        if self._info_mask:
            if not isinstance(self.envs[0].action_space(self.agents[0]), gym.spaces.Discrete):
                raise ValueError(f"{self.name} gives info['action_mask'] for actions that are not Discrete")
            mask_space = gym.spaces.Box(0, 1, (int(self.envs[0].action_space(self.agents[0]).n),), np.int8)
        if isinstance(inner, gym.spaces.Dict):
            spaces = dict(inner.spaces)
            if ACTION_MASK in spaces:
                spaces[ACTION_MASK] = gym.spaces.Box(0, 1, spaces[ACTION_MASK].shape, np.int8)
        elif isinstance(inner, gym.spaces.Box):
            if self._ids and len(inner.shape) == 1 and mask_space is None:
                low = np.concatenate([inner.low.astype(np.float32), np.zeros(n, np.float32)])
                high = np.concatenate([inner.high.astype(np.float32), np.ones(n, np.float32)])
                return gym.spaces.Box(low, high, dtype=np.float32)
            spaces = {"observation": inner}
        else:
            raise ValueError(f"{self.name}: observations of space {inner} are not supported here (a Box, or a "
                             "Dict of Boxes with an optional action_mask)")
        if mask_space is not None:
            spaces[ACTION_MASK] = mask_space
        if self._ids:
            spaces[AGENT_ID] = gym.spaces.Box(0, 1, (n,), np.float32)
        if list(spaces) == ["observation"]:
            return inner
        return gym.spaces.Dict(spaces)

    def _row(self, index: int, observation: Any, info: Mapping[str, Any]) -> Any:
        """One agent's observation as its row has it."""
        n = len(self.agents)
        if isinstance(self.single_observation_space, gym.spaces.Box):
            if self._ids:
                return np.concatenate([np.asarray(observation, np.float32).reshape(-1), _one_hot(index, n)])
            return np.asarray(observation, self.single_observation_space.dtype)
        fields = dict(observation) if isinstance(observation, Mapping) else {"observation": observation}
        if ACTION_MASK in fields:
            fields[ACTION_MASK] = allowed_actions(fields[ACTION_MASK])
        if self._info_mask:
            if ACTION_MASK not in info:
                raise ValueError(f"{self.name} gave info['action_mask'] at its first reset but not since")
            fields[ACTION_MASK] = allowed_actions(info[ACTION_MASK])
        if self._ids:
            fields[AGENT_ID] = _one_hot(index, n)
        return fields

    def _absent(self, index: int) -> Any:
        """The row of an agent not playing now: its observation zeros (its identity kept), and
        where actions are masked, only action 0 allowed (whatever it picks is never sent)."""
        space = self.single_observation_space
        if isinstance(space, gym.spaces.Box):
            row = np.zeros(space.shape, space.dtype)
            if self._ids:
                row[-len(self.agents):] = _one_hot(index, len(self.agents))
            return row
        row = {k: np.zeros(s.shape, s.dtype) for k, s in space.spaces.items()}
        if ACTION_MASK in row:
            row[ACTION_MASK][0] = 1
        if self._ids:
            row[AGENT_ID] = _one_hot(index, len(self.agents))
        return row

    def _rows(self, playing: Any, observations: Mapping[str, Any], infos: Mapping[str, Any]) -> list[Any]:
        """Each agent's row: its observation if it is among ``playing``, else ``_absent``."""
        unknown = set(playing) - set(self.agents)
        if unknown:
            raise RuntimeError(f"{self.name}: agents {', '.join(sorted(map(str, unknown)))} play but are not "
                               "among its possible_agents")
        return [self._row(i, observations[a], infos.get(a) or {}) if a in playing and a in observations
                else self._absent(i) for i, a in enumerate(self.agents)]

    def _batch(self, rows: list[Any]) -> Any:
        if isinstance(self.single_observation_space, gym.spaces.Dict):
            return {k: np.stack([row[k] for row in rows]) for k in self.single_observation_space.spaces}
        return np.stack(rows)

    # -- the vector env --------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        seed = self._seed if seed is None else seed
        self._obs = []
        for i, env in enumerate(self.envs):
            observations, infos = env.reset(seed=None if seed is None else seed + i, options=options)
            self._obs.extend(self._rows(set(env.agents), observations, infos))
        return self._batch(self._obs), {}

    def step(self, actions):
        n = len(self.agents)
        rewards = np.zeros(self.num_envs, np.float64)
        terminated = np.zeros(self.num_envs, bool)
        truncated = np.zeros(self.num_envs, bool)
        final: list[Any] = [None] * self.num_envs
        for c, env in enumerate(self.envs):
            base = c * n
            playing = set(env.agents)  # (only their actions go to the env)
            observations, reward, terms, truncs, infos = env.step(
                {a: actions[base + i] for i, a in enumerate(self.agents) if a in playing})
            last = self._rows(playing, observations, infos)  # (what each agent that played saw last)
            for i, a in enumerate(self.agents):
                if a not in playing:
                    continue  # (an absent row: reward 0, never ending; it sees the absent observation)
                rewards[base + i] = float(reward.get(a, 0.0))
                terminated[base + i] = bool(terms.get(a, False))
                truncated[base + i] = bool(truncs.get(a, False)) and not terminated[base + i]
                if terminated[base + i] or truncated[base + i]:
                    final[base + i] = last[i]
            if not env.agents:  # (every agent is done: the copy starts its next episode now)
                observations, infos = env.reset()
            self._obs[base:base + n] = self._rows(set(env.agents), observations, infos)
        info: dict[str, Any] = {}
        ended = terminated | truncated
        if ended.any():
            info["final_obs"] = np.array(final + [None], dtype=object)[:-1]
            info["_final_obs"] = ended
        return self._batch(self._obs), rewards, terminated, truncated, info

    def close_extras(self, **kwargs: Any) -> None:
        for env in self.envs:
            env.close()


def agent_returns(returns: np.ndarray, agents: list[str]) -> dict[str, float]:
    """An evaluation's returns by agent (rows copy by copy, agents in order): each agent's mean
    over the copies (``eval_return_<agent>``) and the team's, the agents' sum per copy averaged
    (``eval_team_return``)."""
    per_copy = np.asarray(returns, np.float64).reshape(-1, len(agents))
    out = {f"eval_return_{agent}": float(per_copy[:, i].mean()) for i, agent in enumerate(agents)}
    out["eval_team_return"] = float(per_copy.sum(axis=1).mean())
    return out


def agent_rows(env_id: str, num_copies: int, seed: int | None, env_args: Mapping[str, Any] | None = None,
               agent_ids: bool = True) -> AgentRows:
    """``AgentRows`` of ``num_copies`` copies of ``env_id`` (``pettingzoo:...``)."""
    env = AgentRows(env_maker(env_id, env_args), num_copies, seed, agent_ids, name=env_id)
    env.reset(seed=seed)
    return env


__all__ = ["AGENT_ID", "AgentRows", "agent_returns", "agent_rows", "env_maker", "is_pettingzoo"]
