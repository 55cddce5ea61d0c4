"""PettingZoo environments as vector envs: one row per (env copy, agent) pair.

``--env pettingzoo:<module>`` names a module with PettingZoo's ``parallel_env(**kwargs)`` (its
parallel API; e.g. ``pettingzoo:mpe2.simple_spread_v3``) or ``env(**kwargs)`` (its AEC API,
converted with PettingZoo's ``aec_to_parallel`` where the env allows it), and
``pettingzoo:<module>:<function>`` a function of the user's that returns either. ``--env-arg``
values go to that constructor (``shoal.envs.env_sources`` finds it and makes the env).

``AgentRows`` steps ``num_copies`` copies of the env together and lays every copy's agents out as
rows, copy by copy, agents in ``possible_agents`` order: ``num_copies * num_agents`` rows, so
the actor, the adders and replay see a batched single-agent env and one policy acts for every
agent (parameters shared). Each row is one agent's view:

* its **observation**, with the agent's identity appended (``agent_ids``, on by default: a
  one-hot of its index, so that a shared policy can act differently per agent): concatenated to
  a rank-1 Box observation, or as an ``agent_id`` key of a Dict one (``{"observation": ...,
  "agent_id": ...}`` for any other Box). An ``action_mask`` (a Dict key, PettingZoo's
  convention, or ``info["action_mask"]``) stays in, or moves into, the observation, as
  single-agent envs have it (``shoal.envs.observations``);
* its **reward**, **termination** and **truncation**; when every agent of a copy is done, the
  copy resets in the same step (gymnasium's ``SAME_STEP`` autoreset: ``info["final_obs"]``
  holds each row's final observation).

**Agents that leave early** (dead agents) or join late: an agent that is done while others play
on ends its row there (its termination or truncation, its last observation in ``final_obs``);
until it plays again (its copy's next episode) its row is *absent*: a zero observation with its
identity, reward 0, never ending, and where actions are masked only action 0 allowed (continuous
actions: no entry in use). Its
actions are never sent to the env. (The learner trains on absent steps as on any other: their
value is learnt as 0; with a mask their one allowed action carries no policy gradient.) An agent
that leaves ``env.agents`` with neither its termination nor its truncation reported, or a reset
with no agent playing, is one ``RuntimeError`` line naming the env (its row would never end).

**Agents of different spaces** share one row layout: 1-d Box observations padded with zeros to
the longest; Discrete actions padded to the largest set, each row's action mask allowing its
agent's own (with the env's mask, if any); 1-d Box actions padded to the longest, each row's
action mask naming its agent's entries (PPO's Gaussian draws the others from a fixed N(0, 1): no
parameter learns from them; an absent row's mask names none) and the env given the agent's own
entries only, clipped to its own bounds (Box actions of one size but different bounds: no mask,
each clipped to its own). Agents of one
policy must have the same spaces (``policy_groups``: a policy per group, ``shoal.agents.components.groups``).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

import gymnasium as gym
import numpy as np

from shoal.core.specs import ACTION_MASK
from shoal.envs.env_sources import PREFIX, env_maker, is_pettingzoo  # noqa: F401 -- (PREFIX: importable here as before)
from shoal.envs.observations import allowed_actions

AGENT_ID = "agent_id"
GLOBAL_STATE = "global_state"


def _state_space(env: Any, name: str) -> gym.spaces.Box:
    """The space of ``env``'s global state, flat (``state_space`` and ``state()``: PettingZoo's)."""
    space = getattr(env, "state_space", None)
    if not callable(getattr(env, "state", None)) or not isinstance(space, gym.spaces.Box):
        raise ValueError(
            f"{name} gives no global state (PettingZoo's state() and a Box state_space); --global-state needs one"
        )
    return gym.spaces.Box(-np.inf, np.inf, (int(np.prod(space.shape)),), np.float32)


def _sizes(spaces: Mapping[str, Any], what: str, name: str) -> list[int] | None:
    """Each agent's size where agents' ``what`` spaces differ (``None`` where they are the same):
    rank-1 Boxes of one dtype, or Discrete spaces starting at 0; anything else one line."""
    first, *rest = spaces.values()
    if all(space == first for space in rest):
        return None
    agents = list(spaces)
    other = next(a for a in agents if spaces[a] != first)
    flat_boxes = all(
        isinstance(s, gym.spaces.Box) and len(s.shape) == 1 and s.dtype == first.dtype for s in spaces.values()
    )
    discrete = all(isinstance(s, gym.spaces.Discrete) and int(s.start) == 0 for s in spaces.values())
    if not (flat_boxes or (discrete and what == "action")):
        raise ValueError(
            f"{name}: agents {agents[0]} and {other} have different {what} spaces ({first} and "
            f"{spaces[other]}); agents of different spaces are padded to one row layout only for "
            f"1-d Box {what}s{' and Discrete actions' if what == 'action' else ''}"
        )
    return [int(s.n) if discrete else int(s.shape[0]) for s in spaces.values()]


def _padded(spaces: Mapping[str, Any]) -> gym.Space:
    """The one space every agent's fits in: the largest Discrete, or a Box as long as the longest
    (each entry's bounds those of every agent that has it; padding entries 0)."""
    first = next(iter(spaces.values()))
    if isinstance(first, gym.spaces.Discrete):
        return gym.spaces.Discrete(max(int(s.n) for s in spaces.values()))
    size = max(s.shape[0] for s in spaces.values())
    low, high = np.full(size, np.inf), np.full(size, -np.inf)
    for s in spaces.values():
        n = s.shape[0]
        low, high = np.minimum(low, _pad(s.low, size)), np.maximum(high, _pad(s.high, size))
        low[n:], high[n:] = np.minimum(low[n:], 0.0), np.maximum(high[n:], 0.0)
    return gym.spaces.Box(low.astype(first.dtype), high.astype(first.dtype), dtype=first.dtype)


def _action_size(space: gym.Space) -> int:
    """How many actions (Discrete) or action entries (a 1-d Box) a row's mask has."""
    return int(space.n) if isinstance(space, gym.spaces.Discrete) else int(cast(tuple[int], space.shape)[0])


def _pad(values: Any, size: int) -> np.ndarray:
    values = np.asarray(values).reshape(-1)
    return np.concatenate([values, np.zeros(size - len(values), values.dtype)]) if len(values) < size else values


def _one_hot(index: int, size: int) -> np.ndarray:
    out = np.zeros(size, np.float32)
    out[index] = 1.0
    return out


class AgentRows(gym.vector.VectorEnv):
    """``num_copies`` copies of a PettingZoo parallel env (``make()`` each), one row per (copy,
    agent) pair; see the module docstring. ``seed``: copy ``i`` resets with ``seed + i``."""

    def __init__(
        self,
        make: Callable[[], Any],
        num_copies: int,
        seed: int | None = None,
        agent_ids: bool = True,
        name: str = "the PettingZoo env",
        global_state: bool = False,
    ) -> None:
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
        self._ids = agent_ids and len(self.agents) > 1
        self._state = _state_space(first, name) if global_state else None
        # Agents of different spaces: observations padded with zeros, actions to the largest set
        # (the rows' masks allow each agent its own actions).
        self._obs_sizes = _sizes(obs_spaces, "observation", name)
        self._action_sizes = _sizes(act_spaces, "action", name)
        self._inner = _padded(obs_spaces) if self._obs_sizes else obs_spaces[self.agents[0]]
        self.single_action_space = _padded(act_spaces) if self._action_sizes else act_spaces[self.agents[0]]
        self._steps: dict[int, int] = {}  # (each copy's steps in its episode, by id: for the messages)
        observations, infos = self._reset(first, seed=seed)
        self._info_mask = any(ACTION_MASK in (infos.get(a) or {}) for a in self.agents) and not (
            isinstance(self._inner, gym.spaces.Dict) and ACTION_MASK in self._inner.spaces
        )
        # (each row's own actions, or action entries, where agents have different numbers of them)
        self._size_mask = self._action_sizes is not None and len(set(self._action_sizes)) > 1
        self._action_spaces = [act_spaces[a] for a in self.agents]  # (an agent's action: within its own bounds)
        self.single_observation_space = self._space()
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
        if self._info_mask and not isinstance(self.single_action_space, gym.spaces.Discrete):
            raise ValueError(f"{self.name} gives info['action_mask'] for actions that are not Discrete")
        if self._info_mask or self._size_mask:
            mask_space = gym.spaces.Box(0, 1, (_action_size(self.single_action_space),), np.int8)
        if isinstance(inner, gym.spaces.Dict):
            spaces = dict(inner.spaces)
            if ACTION_MASK in spaces:
                spaces[ACTION_MASK] = gym.spaces.Box(0, 1, spaces[ACTION_MASK].shape, np.int8)
        elif isinstance(inner, gym.spaces.Box):
            if self._ids and len(inner.shape) == 1 and mask_space is None and self._state is None:
                low = np.concatenate([inner.low.astype(np.float32), np.zeros(n, np.float32)])
                high = np.concatenate([inner.high.astype(np.float32), np.ones(n, np.float32)])
                return gym.spaces.Box(low, high, dtype=np.float32)
            spaces = {"observation": inner}
        else:
            raise ValueError(
                f"{self.name}: observations of space {inner} are not supported here (a Box, or a "
                "Dict of Boxes with an optional action_mask)"
            )
        if mask_space is not None:
            spaces[ACTION_MASK] = mask_space
        if self._ids:
            spaces[AGENT_ID] = gym.spaces.Box(0, 1, (n,), np.float32)
        if self._state is not None:
            spaces[GLOBAL_STATE] = self._state
        if list(spaces) == ["observation"]:
            return inner
        return gym.spaces.Dict(spaces)

    def _row(self, index: int, observation: Any, info: Mapping[str, Any]) -> Any:
        """One agent's observation as its row has it."""
        n = len(self.agents)
        if self._obs_sizes:
            observation = _pad(observation, cast(tuple[int], self._inner.shape)[0])
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
        if self._size_mask:  # (the agent's own actions, or action entries: the first n of the padded set)
            own = _pad(
                np.ones(cast(list[int], self._action_sizes)[index], np.int8), _action_size(self.single_action_space)
            )
            fields[ACTION_MASK] = own if ACTION_MASK not in fields else own & _pad(fields[ACTION_MASK], len(own))
        if self._ids:
            fields[AGENT_ID] = _one_hot(index, n)
        return fields

    def _absent(self, index: int) -> Any:
        """The row of an agent not playing now: its observation zeros (its identity kept), and
        where actions are masked, only action 0 allowed, or for continuous actions no entry in
        use (whatever it picks is never sent)."""
        space = self.single_observation_space
        if isinstance(space, gym.spaces.Box):
            row = np.zeros(space.shape, space.dtype)
            if self._ids:
                row[-len(self.agents) :] = _one_hot(index, len(self.agents))
            return row
        spaces: Mapping[str, Any] = cast(gym.spaces.Dict, space).spaces  # (Boxes, read as such)
        fields = {k: np.zeros(s.shape, s.dtype) for k, s in spaces.items()}
        if ACTION_MASK in fields and isinstance(self.single_action_space, gym.spaces.Discrete):
            fields[ACTION_MASK][0] = 1  # (continuous actions: no entry in use, no gradient)
        if self._ids:
            fields[AGENT_ID] = _one_hot(index, len(self.agents))
        return fields

    def _rows(
        self, env: Any, observations: Mapping[str, Any], infos: Mapping[str, Any], playing: Any = None
    ) -> list[Any]:
        """Each agent's row: its observation if it is among ``playing`` (default: ``env.agents``),
        else ``_absent``; with the env's global state, each row has it."""
        playing = set(env.agents) if playing is None else playing
        unknown = set(playing) - set(self.agents)
        if unknown:
            raise RuntimeError(
                f"{self.name}: agents {', '.join(sorted(map(str, unknown)))} play but are not among its possible_agents"
            )
        rows = [
            self._row(i, observations[a], infos.get(a) or {}) if a in playing and a in observations else self._absent(i)
            for i, a in enumerate(self.agents)
        ]
        if self._state is not None:
            state = np.asarray(env.state(), np.float32).reshape(-1)
            for row in rows:
                row[GLOBAL_STATE] = state
        return rows

    def _batch(self, rows: list[Any]) -> Any:
        if isinstance(self.single_observation_space, gym.spaces.Dict):
            return {k: np.stack([row[k] for row in rows]) for k in self.single_observation_space.spaces}
        return np.stack(rows)

    # -- the vector env --------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        seed = self._seed if seed is None else seed
        self._obs = []
        for i, env in enumerate(self.envs):
            observations, infos = self._reset(env, seed=None if seed is None else seed + i, options=options)
            self._obs.extend(self._rows(env, observations, infos))
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
                {a: self._own(i, actions[base + i]) for i, a in enumerate(self.agents) if a in playing}
            )
            self._check_left(env, playing, terms, truncs)
            last = self._rows(env, observations, infos, playing)  # (what each agent that played saw last)
            for i, a in enumerate(self.agents):
                if a not in playing:
                    continue  # (an absent row: reward 0, never ending; it sees the absent observation)
                rewards[base + i] = float(reward.get(a, 0.0))
                terminated[base + i] = bool(terms.get(a, False))
                truncated[base + i] = bool(truncs.get(a, False)) and not terminated[base + i]
                if terminated[base + i] or truncated[base + i]:
                    final[base + i] = last[i]
            if not env.agents:  # (every agent is done: the copy starts its next episode now)
                observations, infos = self._reset(env)
            self._obs[base : base + n] = self._rows(env, observations, infos)
        info: dict[str, Any] = {}
        ended = terminated | truncated
        if ended.any():
            info["final_obs"] = np.array(final + [None], dtype=object)[:-1]
            info["_final_obs"] = ended
        return self._batch(self._obs), rewards, terminated, truncated, info

    def _reset(self, env: Any, **kwargs: Any) -> tuple[Any, Any]:
        """``env.reset(**kwargs)``; one with no agent playing is one line (every step would reset it)."""
        observations, infos = env.reset(**kwargs)
        if not env.agents:
            raise RuntimeError(
                f"{self.name}: no agent plays after reset() (its agents are empty): its episodes could never start"
            )
        self._steps[id(env)] = 0
        return observations, infos

    def _check_left(self, env: Any, playing: set, terms: Mapping[str, Any], truncs: Mapping[str, Any]) -> None:
        """One line (``RuntimeError``, naming the env) for agents that played this step and are no
        longer in ``env.agents`` with neither a termination nor a truncation reported: their rows
        would never end, and an evaluation would wait forever for them (PettingZoo's API removes
        an agent only when it is done; its ``parallel_api_test`` checks the same)."""
        step = self._steps[id(env)] = self._steps.get(id(env), 0) + 1
        left = playing.difference(env.agents)  # (almost always empty: nothing more to look at)
        silent = [a for a in self.agents if a in left and not (terms.get(a, False) or truncs.get(a, False))]
        if silent:
            raise RuntimeError(
                f"{self.name}: agent{'s' if len(silent) > 1 else ''} {', '.join(map(str, silent))} left (no longer in its agents) "
                f"after step {step} of an episode with no termination nor truncation reported; "
                "PettingZoo's parallel API removes an agent only when its terminations or "
                "truncations entry is True (pettingzoo.test.parallel_api_test checks it)"
            )

    def _own(self, index: int, action: Any) -> Any:
        """Agent ``index``'s action as its env takes it: a padded Box action cut to its own size
        and clipped to its own bounds (the padded space's are the widest of any agent's)."""
        if self._action_sizes is None or isinstance(self.single_action_space, gym.spaces.Discrete):
            return action
        space = self._action_spaces[index]
        return np.clip(np.asarray(action)[: self._action_sizes[index]], space.low, space.high).astype(space.dtype)

    def render(self) -> Any:
        """The first copy's frame (its ``render()``; made with ``render_mode``, an env argument)."""
        return self.envs[0].render()

    def close_extras(self, **kwargs: Any) -> None:
        for env in self.envs:
            env.close()


def policy_groups(
    env_id: str, env_args: Mapping[str, Any] | None = None, mapping: Mapping[str, str] | None = None
) -> tuple[list[str], list[int]]:
    """The policies of ``env_id``'s agents (read off one env made and closed): with ``mapping``,
    its groups (``resolve_groups``); without, one policy for all. A one-line ``ValueError``
    where two agents of one policy have different observation or action spaces (agents of
    different groups may: ``AgentRows`` pads them to one row layout)."""
    env = env_maker(env_id, env_args)()
    try:
        agents = list(env.possible_agents)
        names, indices = (
            resolve_groups([str(a) for a in agents], mapping, env_id) if mapping else (["shared"], [0] * len(agents))
        )
        for what in ("observation", "action"):
            first: dict[int, Any] = {}
            for agent, group in zip(agents, indices):
                space = getattr(env, f"{what}_space")(agent)
                if group not in first:
                    first[group] = (agent, space)
                elif space != first[group][1]:
                    other, seen = first[group]
                    raise ValueError(
                        f"{env_id}: agents {other} and {agent} have different {what} spaces ({seen} and {space}); "
                        + (
                            f"group {names[group]!r} shares one policy, so its agents' spaces must be the same"
                            if mapping
                            else f"one policy acts for every agent: give agents of different spaces "
                            f"their own groups (--agent-group {other}=GROUP --agent-group {agent}=OTHER)"
                        )
                    )
        return names, indices
    finally:
        env.close()


def resolve_groups(
    agents: Sequence[str], mapping: Mapping[str, str], name: str = "the env"
) -> tuple[list[str], list[int]]:
    """The groups of a policy per group (``--agent-group PATTERN=GROUP``): ``mapping`` from a
    pattern of agent names (``fnmatch``: ``adversary_*``; or a name) to a group's name. Returns
    the groups' names (in the order their first agent comes) and each agent's group index.
    A one-line ``ValueError`` for a pattern that names no agent, an agent no pattern names, or an
    agent two patterns put in different groups."""
    if not isinstance(mapping, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) and k and v for k, v in mapping.items()
    ):
        raise ValueError(f"agent groups must map agent-name patterns to group names (strings), got {mapping!r}")
    if len(agents) < 2:
        raise ValueError(f"agent groups (--agent-group) need two agents or more; {name} has {', '.join(agents)}")
    for pattern in mapping:
        if not fnmatch.filter(agents, pattern):
            raise ValueError(
                f"agent group pattern {pattern!r} (-> {mapping[pattern]!r}) names no agent of {name}; "
                f"its agents: {', '.join(agents)}"
            )
    names: list[str] = []
    indices: list[int] = []
    for agent in agents:
        chosen = {group for pattern, group in mapping.items() if fnmatch.fnmatchcase(agent, pattern)}
        if not chosen:
            raise ValueError(
                f"agent {agent!r} of {name} is in no group (give it one: --agent-group "
                f"{agent}=GROUP; groups so far: {', '.join(sorted(set(mapping.values())))})"
            )
        if len(chosen) > 1:
            raise ValueError(
                f"agent {agent!r} of {name} is put in groups {', '.join(sorted(chosen))} by "
                "different patterns; each agent belongs to one group"
            )
        group = chosen.pop()
        if group not in names:
            names.append(group)
        indices.append(names.index(group))
    return names, indices


def agent_returns(returns: np.ndarray, agents: list[str]) -> dict[str, float]:
    """An evaluation's returns by agent (rows copy by copy, agents in order): each agent's mean
    over the copies (``eval_return_<agent>``) and the team's, the agents' sum per copy averaged
    (``eval_team_return``)."""
    per_copy = np.asarray(returns, np.float64).reshape(-1, len(agents))
    out = {f"eval_return_{agent}": float(per_copy[:, i].mean()) for i, agent in enumerate(agents)}
    out["eval_team_return"] = float(per_copy.sum(axis=1).mean())
    return out


def agent_rows(
    env_id: str,
    num_copies: int,
    seed: int | None,
    env_args: Mapping[str, Any] | None = None,
    agent_ids: bool = True,
    global_state: bool = False,
) -> AgentRows:
    """``AgentRows`` of ``num_copies`` copies of ``env_id`` (``pettingzoo:...``)."""
    env = AgentRows(env_maker(env_id, env_args), num_copies, seed, agent_ids, name=env_id, global_state=global_state)
    env.reset(seed=seed)
    return env


__all__ = [
    "AGENT_ID",
    "GLOBAL_STATE",
    "AgentRows",
    "agent_returns",
    "agent_rows",
    "env_maker",
    "is_pettingzoo",
    "policy_groups",
    "resolve_groups",
]
