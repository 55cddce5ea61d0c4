"""JaxMARL's multi-agent environments (``--env jaxmarl:MPE_simple_spread_v3``) with their agents
as rows, for the compiled loop (``--launcher anakin``) and, wrapped, the replay-backed actors.

JaxMARL (Rutherford et al., 2024) writes its envs in JAX with one API for many agents:
``reset(key) -> (obs, state)`` and ``step(key, state, actions) -> (obs, state, rewards, dones,
infos)``, each of ``obs``/``actions``/``rewards``/``dones`` a dict keyed by agent name (``dones``
also has ``"__all__"``). ``JaxMarlEnv`` is one copy of such an env with gymnax's functional API
and a leading agent axis (``obs [A, ...]``, ``action [A]``, ``reward [A]``); ``AgentRows`` steps
``num_copies`` copies of it and lays each copy's agents out as rows, copy by copy, agents in the
env's ``agents`` order (``num_copies * A`` rows), as Shoal lays out a PettingZoo env's
(``shoal.envs.multiagent``): one policy acts for every agent, parameters shared (IPPO with PPO),
and env steps count rows. Each row is one agent's view:

* its **observation**, with its identity (``agent_ids``, on by default: a one-hot of its index)
  concatenated to a rank-1 observation (cast to float32), or as the ``agent_id`` key of a Dict
  ``{"observation": ..., "agent_id": ...}`` for any other Box;
* where the env masks its agents' actions (SMAX's ``get_avail_actions``, Hanabi's
  ``get_legal_moves``), its agent's mask, as the Dict's ``action_mask`` key (int8; an agent with
  no allowed action is allowed action 0), which PPO's categorical honours as a single-agent env's;
* with ``global_state`` (``--global-state``: MAPPO's centralised critic), the Dict's
  ``global_state`` key: every agent's observation of its copy, flattened and concatenated (the
  "world state" JaxMARL's own MAPPO baselines give MPE's critic), read by the value head only;
* its **reward**, and the copy's end: every row of a copy ends when ``dones["__all__"]`` does,
  and the copy resets in the same step (the observation it ended in kept, ``Step.final_observation``).
  An end at the env's time limit (its state's ``step`` or ``time`` at ``max_steps``: MPE's
  episodes of 25 steps, Overcooked's 400) is a truncation, bootstrapped; any other a termination.

What maps: envs whose agents all have one Box observation space and one Discrete or Box action
space (every MPE task of identical agents: ``MPE_simple_v3``, ``MPE_simple_spread_v3``,
``MPE_simple_reference_v3``, the FACMAC tasks; ``SMAX`` and ``HeuristicEnemySMAX``, ``hanabi``,
``coin_game``, ``overcooked``, and ``walker2d_2x3`` and ``ant_4x2`` where Brax is installed).
Agents of different spaces (``MPE_simple_tag_v3``'s adversaries and good agents, ``hopper_3x1``),
observations that are not a Box (``switch_riddle``, ``storm``) and masked actions that are not
Discrete (``jaxnav``) are one line each. (A space is read as the env's observations have it, traced:
Overcooked's says ``(5, 4, 26)`` for observations of ``(4, 5, 26)``.) ``--env-arg KEY=VALUE`` values go to JaxMARL's constructor (``jaxmarl.make(name, **args)``).

JaxMARL is the ``jaxmarl`` extra, installed without its dependencies (its 0.2.0 wheel's metadata
lets pip move JAX and gymnasium off Shoal's pins; what it imports beside JAX, flax and chex,
jaxtyping and matplotlib, the extra has). It imports on both stacks (JAX 0.4.34 and 0.12):
``pip install -e '.[jaxmarl]' && pip install --no-deps "jaxmarl==0.2.0"``.
"""

from __future__ import annotations

import contextlib
import difflib
import inspect
import io
import sys
import threading
from collections.abc import Iterator, Mapping
from typing import Any

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np

from shoal.core.specs import ACTION_MASK, make_environment_spec
from shoal.envs.jax_vector import EnvState, JaxVectorEnv, Step, counted_step
from shoal.envs.multiagent import AGENT_ID, GLOBAL_STATE

SOURCE = "jaxmarl"
INSTALL = "pip install -e '.[jaxmarl]' && pip install --no-deps \"jaxmarl==0.2.0\""
MASKED = ("get_avail_actions", "get_legal_moves")  # (the methods with which an env masks its agents' actions)


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """stdout swallowed, ``sys.__stdout__`` too: JaxMARL's registry prints which submodules it
    finds, and its MABrax module, importing Brax, puts ``sys.__stdout__`` back as stdout."""
    saved, saved_dunder, sink = sys.stdout, sys.__stdout__, io.StringIO()
    sys.stdout = sink
    setattr(sys, "__stdout__", sink)  # noqa: B010 -- (mypy: a name typeshed marks final)
    try:
        yield
    finally:
        sys.stdout = saved
        setattr(sys, "__stdout__", saved_dunder)  # noqa: B010


_IMPORTING = threading.Lock()  # (one import at a time swaps the process's stdout)


def _jaxmarl() -> Any:
    try:
        with _IMPORTING:
            if "jaxmarl" in sys.modules:  # (its import has run: nothing to quiet)
                import jaxmarl  # lazy: optional extra (jaxmarl), installed --no-deps
            else:
                with _quiet():
                    import jaxmarl  # lazy: optional extra (jaxmarl), installed --no-deps
    except ImportError:
        raise ValueError(f"jaxmarl envs need the 'jaxmarl' extra, which is not installed; run {INSTALL}") from None
    return jaxmarl


def jaxmarl_env_names() -> list[str]:
    """The env names JaxMARL registers (``MPE_simple_spread_v3``, ``SMAX``, ...)."""
    return list(_jaxmarl().registered_envs)


def check_jaxmarl_name(name: str) -> None:
    """One-line ``ValueError`` for a name JaxMARL does not register (naming close matches)."""
    known = jaxmarl_env_names()
    if name not in known:
        close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
        hint = f"; did you mean {', '.join(f'{SOURCE}:{c}' for c in close)}?" if close else ""
        raise ValueError(f"unknown jaxmarl environment id {name!r}{hint} (jaxmarl registers {', '.join(known)})")


def _gym_space(space: Any, what: str, env_id: str) -> gym.Space:
    """A JaxMARL ``Box``/``Discrete`` as gymnasium's; one line naming the env for anything else."""
    kind = type(space).__name__
    if kind == "Discrete" and hasattr(space, "n"):
        return gym.spaces.Discrete(int(space.n))
    if kind == "Box" and hasattr(space, "shape"):
        shape = tuple(int(d) for d in np.shape(np.zeros(space.shape)))
        dtype = np.dtype(space.dtype)
        low = np.broadcast_to(np.asarray(space.low, dtype), shape)
        high = np.broadcast_to(np.asarray(space.high, dtype), shape)
        return gym.spaces.Box(low, high, shape, dtype)
    raise ValueError(
        f"{env_id}: its agents' {what} space is a {kind}; the jaxmarl source maps Box observations and "
        "Discrete or Box actions"
    )


class JaxMarlEnv:
    """One copy of a JaxMARL env with gymnax's functional API and a leading agent axis
    (``obs [A, ...]``, ``action [A, ...]``, ``reward``/``terminated``/``truncated`` ``[A]``);
    ``params`` are unused (JaxMARL's envs hold theirs: ``--env-arg`` goes to the constructor).
    Checked when made: one line where the agents' spaces differ or are not mapped, or where it
    masks actions that are not Discrete. An env that masks its agents' actions (SMAX's
    ``get_avail_actions``, Hanabi's ``get_legal_moves``) names the method in ``mask_method``;
    ``action_mask(state)`` reads it (``[A, n]`` int8)."""

    auto_resets = False

    def __init__(self, env_id: str, env: Any) -> None:
        self.env_id, self.env, self.agents = env_id, env, list(env.agents)
        observation = self._one_space("observation", env.observation_space)
        self._action = self._one_space("action", env.action_space)
        self.mask_method = next((m for m in MASKED if _overrides(env, m)), None)
        if self.mask_method is not None and not isinstance(self._action, gym.spaces.Discrete):
            raise ValueError(
                f"{env_id} masks its agents' actions ({self.mask_method}), which are not Discrete "
                f"({self._action}); the jaxmarl source carries masks of Discrete actions only"
            )
        if not isinstance(observation, gym.spaces.Box):
            raise ValueError(f"{env_id}: its agents' observation space is Discrete; the jaxmarl source maps Box ones")
        self._observation: gym.spaces.Box = self._as_observed(observation)

    def _as_observed(self, space: gym.spaces.Box) -> gym.spaces.Box:
        """``space`` with the shape the env's observations have (traced, not run): Overcooked's
        space says ``(5, 4, 26)`` for observations of ``(4, 5, 26)``."""
        observed = jax.eval_shape(self.env.reset, jax.random.PRNGKey(0))[0][self.agents[0]]
        if tuple(observed.shape) == space.shape:
            return space
        low, high = float(np.min(space.low)), float(np.max(space.high))
        return gym.spaces.Box(low, high, tuple(observed.shape), space.dtype)

    def _one_space(self, what: str, space_of: Any) -> gym.Space:
        spaces = {agent: _gym_space(space_of(agent), what, self.env_id) for agent in self.agents}
        first = spaces[self.agents[0]]
        other = next((a for a in self.agents if spaces[a] != first), None)
        if other is not None:
            raise ValueError(
                f"{self.env_id}: agents {self.agents[0]} and {other} have different {what} spaces ({first} and "
                f"{spaces[other]}); the jaxmarl source lays agents out as rows of one policy, so they must match"
            )
        return first

    @property
    def num_agents(self) -> int:
        return len(self.agents)

    @property
    def default_params(self) -> None:
        return None

    def observation_space(self, params: Any = None) -> gym.spaces.Box:
        """Each agent's observation space (the same for all)."""
        return self._observation

    def action_space(self, params: Any = None) -> gym.Space:
        """Each agent's action space (the same for all)."""
        return self._action

    def _stack(self, values: Mapping[str, Any]) -> jax.Array:
        return jnp.stack([jnp.asarray(values[agent]) for agent in self.agents])

    def action_mask(self, state: Any) -> jax.Array:
        """``[A, n]`` int8: each agent's allowed actions in ``state`` (``mask_method``'s); an agent
        with none allowed is allowed action 0 (a categorical over no action is undefined)."""
        assert self.mask_method is not None
        mask = self._stack(getattr(self.env, self.mask_method)(state)).astype(jnp.int8)
        none = jnp.logical_not(mask.any(-1, keepdims=True))
        return jnp.where(none & (jnp.arange(mask.shape[-1]) == 0), jnp.int8(1), mask)

    def reset(self, key: jax.Array, params: Any = None) -> tuple[jax.Array, Any]:
        obs, state = self.env.reset(key)
        return self._stack(obs), state

    def step(self, key: jax.Array, state: Any, action: jax.Array, params: Any = None) -> tuple[Any, ...]:
        """JaxMARL's ``step_env`` (no reset: ``AgentRows`` resets where a copy ended, keeping
        the observation it ended in), as ``(obs, state, reward, terminated, truncated, {})``."""
        obs, state, reward, dones, _ = self.env.step_env(key, state, {a: action[i] for i, a in enumerate(self.agents)})
        done = jnp.asarray(dones["__all__"], bool)
        clock = getattr(state, "step", getattr(state, "time", None))
        limit = getattr(self.env, "max_steps", None)
        at_limit = jnp.asarray(clock >= limit, bool) if clock is not None and limit is not None else jnp.bool_(False)
        truncated = jnp.logical_and(done, at_limit)
        terminated = jnp.logical_and(done, jnp.logical_not(truncated))
        n = self.num_agents
        rewards = self._stack(reward).astype(jnp.float32)
        return self._stack(obs), state, rewards, jnp.full(n, terminated), jnp.full(n, truncated), {}


def _overrides(env: Any, method: str) -> bool:
    """Whether ``env``'s class defines ``method`` beyond JaxMARL's ``MultiAgentEnv`` (where it
    raises ``NotImplementedError``)."""
    from jaxmarl.environments.multi_agent_env import MultiAgentEnv  # lazy: optional extra

    mine = getattr(type(env), method, None)
    return mine is not None and mine is not getattr(MultiAgentEnv, method, None)


def make_jaxmarl_env(name: str, env_args: Mapping[str, Any] | None = None) -> JaxMarlEnv:
    """``JaxMarlEnv`` of the JaxMARL env ``name`` made with ``env_args`` as keyword arguments;
    one line for an unknown name, arguments it refuses, or spaces it cannot map."""
    check_jaxmarl_name(name)
    env_id = f"{SOURCE}:{name}"
    try:
        env = _jaxmarl().make(name, **dict(env_args or {}))
    except (TypeError, ValueError, AssertionError, ImportError) as e:
        reason = " ".join(str(e).split())[:200]
        raise ValueError(f"{env_id} with arguments {dict(env_args or {})}: {type(e).__name__}: {reason}") from None
    known = _arguments(type(env))
    unknown = sorted(set(env_args or {}) - set(known))
    if unknown:  # (JaxMARL's constructors pass **kwargs on to their bases, which drop what they do not take)
        raise ValueError(f"{env_id} takes no argument(s) {', '.join(unknown)}; it takes: {', '.join(known)}")
    return JaxMarlEnv(env_id, env)


def _arguments(cls: type) -> list[str]:
    """The keyword arguments ``cls``'s constructor and its bases' (down the ``**kwargs`` they pass on) name."""
    names: list[str] = []
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None or klass is object:
            continue
        parameters = list(inspect.signature(init).parameters.values())[1:]
        names += [
            p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in names
        ]
        if not any(p.kind is p.VAR_KEYWORD for p in parameters):
            break
    return names


class AgentRows(JaxVectorEnv):
    """``num_copies`` copies of a ``JaxMarlEnv``, a row per (copy, agent): ``num_envs`` is
    ``num_copies * A`` (module docstring). ``reset(key, rows)`` makes enough copies for
    ``rows`` rows (a last copy's extra agents included: an evaluation reads the first ``rows``)."""

    def __init__(self, env: JaxMarlEnv, num_copies: int, agent_ids: bool = True, global_state: bool = False) -> None:
        self.env, self.params, self.auto_resets = env, None, False
        self.num_agents, self.num_copies, self.agents = env.num_agents, int(num_copies), list(env.agents)
        self.num_envs = self.num_copies * self.num_agents
        self._ids, self._state, self._mask = bool(agent_ids), bool(global_state), env.mask_method is not None
        inner, action = env.observation_space(), env.action_space()
        self._concat = self._ids and not self._state and not self._mask and inner.low.ndim == 1
        self._num_actions = int(action.n) if isinstance(action, gym.spaces.Discrete) else 0
        self.spec = make_environment_spec(_Spaces(self._row_space(inner), action), self.num_envs)
        self._bounds = (action.low, action.high) if isinstance(action, gym.spaces.Box) else None

    def _row_space(self, inner: gym.spaces.Box) -> gym.Space:
        n = self.num_agents
        if self._concat:
            low = np.concatenate([inner.low.astype(np.float32), np.zeros(n, np.float32)])
            high = np.concatenate([inner.high.astype(np.float32), np.ones(n, np.float32)])
            return gym.spaces.Box(low, high, dtype=np.float32)
        spaces: dict[str, gym.Space] = {"observation": inner}
        if self._ids:
            spaces[AGENT_ID] = gym.spaces.Box(0, 1, (n,), np.float32)
        if self._state:
            size = n * int(np.prod(inner.shape))
            spaces[GLOBAL_STATE] = gym.spaces.Box(-np.inf, np.inf, (size,), np.float32)
        if self._mask:
            spaces[ACTION_MASK] = gym.spaces.Box(0, 1, (self._num_actions,), np.int8)
        return inner if len(spaces) == 1 else gym.spaces.Dict(spaces)

    def _rows(self, obs: jax.Array, mask: jax.Array | None = None) -> Any:
        """``[C, A, ...]`` observations (and ``[C, A, n]`` action masks) as rows ``[C * A, ...]``,
        each as its row has it."""
        copies, n = obs.shape[0], self.num_agents
        ids = jnp.broadcast_to(jnp.eye(n, dtype=jnp.float32), (copies, n, n))
        if self._concat:
            return jnp.concatenate([obs.astype(jnp.float32), ids], -1).reshape(copies * n, -1)
        flat = obs.reshape(copies * n, *obs.shape[2:])
        if not (self._ids or self._state or self._mask):
            return flat
        row: dict[str, jax.Array] = {"observation": flat}
        if self._ids:
            row[AGENT_ID] = ids.reshape(copies * n, n)
        if self._state:
            world = obs.reshape(copies, 1, -1).astype(jnp.float32)
            row[GLOBAL_STATE] = jnp.broadcast_to(world, (copies, n, world.shape[-1])).reshape(copies * n, -1)
        if mask is not None:
            row[ACTION_MASK] = mask.reshape(copies * n, -1)
        return row

    def _masks(self, state: Any) -> jax.Array | None:
        """Each copy's agents' action masks ``[C, A, n]`` in its ``state`` ``[C, ...]`` (``None``: unmasked)."""
        return jax.vmap(self.env.action_mask)(state) if self._mask else None

    def reset(self, key: jax.Array, num_envs: int | None = None) -> tuple[Any, EnvState]:
        rows = self.num_envs if num_envs is None else num_envs
        copies = -(-rows // self.num_agents)
        obs, state = jax.vmap(self.env.reset, (0, None))(jax.random.split(key, copies), None)
        zeros = copies * self.num_agents
        return self._rows(obs, self._masks(state)), EnvState(
            state, jnp.zeros(zeros, jnp.float32), jnp.zeros(zeros, jnp.int32)
        )

    def _step_copy(self, key: jax.Array, state: Any, action: jax.Array) -> tuple[Any, ...]:
        step_key, reset_key = jax.random.split(key)
        if self._bounds is not None:
            action = jnp.clip(action, *self._bounds)
        obs, next_state, reward, terminated, truncated, _ = self.env.step(step_key, state, action)
        done = jnp.logical_or(terminated[0], truncated[0])
        reset_obs, reset_state = self.env.reset(reset_key)
        pick = lambda a, b: jax.lax.select(jnp.broadcast_to(done, jnp.shape(a)), a, b)  # noqa: E731
        kept = jax.tree_util.tree_map(pick, reset_state, next_state)
        return pick(reset_obs, obs), obs, kept, next_state, reward, terminated, truncated

    def step(self, key: jax.Array, state: EnvState, action: jax.Array) -> tuple[EnvState, Step]:
        rows = state.episode_return.shape[0]
        copies, n = rows // self.num_agents, self.num_agents
        actions = action.reshape(copies, n, *action.shape[1:])
        obs, final, env_state, ended_state, reward, terminated, truncated = jax.vmap(self._step_copy)(
            jax.random.split(key, copies), state.env, actions
        )
        reward, terminated, truncated = (x.reshape(rows) for x in (reward, terminated, truncated))
        observations = self._rows(obs, self._masks(env_state))
        finals = self._rows(final, self._masks(ended_state))
        return counted_step(state, env_state, observations, finals, reward, terminated, truncated)


class _Spaces:
    def __init__(self, observation_space: gym.Space, action_space: gym.Space) -> None:
        self.observation_space, self.action_space = observation_space, action_space


__all__ = [
    "INSTALL",
    "SOURCE",
    "AgentRows",
    "JaxMarlEnv",
    "check_jaxmarl_name",
    "jaxmarl_env_names",
    "make_jaxmarl_env",
]
