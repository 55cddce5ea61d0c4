"""Environments written in JAX: gymnax's ids (``--env gymnax:CartPole-v1``), Brax's
(``--env brax:halfcheetah``: ``shoal.envs.brax_envs``), Craftax's (``--env
craftax:Craftax-Symbolic-v1``) and any env with gymnax's functional API, stepped as ``N`` copies
inside one compiled function.

The protocol (``JaxEnv``) is gymnax's: an env object with

* ``default_params``: the env's parameters (a pytree; gymnax's ``EnvParams``);
* ``reset(key, params) -> (obs, state)``;
* ``step(key, state, action, params) -> (obs, state, reward, terminated, truncated, info)``, or
  gymnax's older five values ``(obs, state, reward, done, info)`` (then ``info["truncated"]``,
  where present, marks a time limit: bootstrapped, not terminal);
* ``observation_space(params)`` and ``action_space(params)``: gymnax spaces (``Box`` with
  ``low``, ``high``, ``shape``, ``dtype``; ``Discrete`` with ``n``), or gymnasium's.

An env whose ``step`` already resets at an episode's end (gymnax's ``Environment`` does, and
puts the last observation in ``info["final_observation"]``) says so with ``auto_resets = True``;
otherwise ``JaxVectorEnv.step`` resets it itself. Your own JAX env is one class away: write these
five members and pass ``JaxVectorEnv(MyEnv(), num_envs)`` to ``shoal.launch.experiments.anakin``.

``JaxVectorEnv`` is the adapter the compiled loop steps: ``num_envs`` copies ``vmap``-ed, reset
inside ``step`` where an episode ended, with each env's episode return and length carried as
arrays (``EnvState``), the observation the step ended in kept beside the next one (``Step``),
continuous actions clipped to the space. Its spaces map to Shoal's ``EnvironmentSpec`` as a
gymnasium env's do (``core.specs``): a Box observation, Discrete or Box actions; anything else
is one line.

gymnax is the ``gymnax`` extra, installed without its dependencies (its wheel asks for
gymnasium < 1.4, Shoal runs 1.4; what it imports at run time, JAX, flax, chex and PyYAML, Shoal
installs): ``pip install -e '.[gymnax]' && pip install --no-deps "gymnax==1.0.1"``.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import sys
import types
from collections.abc import Mapping
from typing import Any, NamedTuple, Protocol, runtime_checkable

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np

from shoal.core.specs import EnvironmentSpec, make_environment_spec
from shoal.envs.brax_envs import brax_env_names, make_brax_env

SOURCES = ("gymnax", "brax", "craftax", "jaxmarl")  # the JAX env sources ``--env SOURCE:ID`` names
INSTALL = "pip install -e '.[gymnax]' && pip install --no-deps \"gymnax==1.0.1\""
CRAFTAX_INSTALL = "pip install -e '.[craftax]' && pip install --no-deps \"craftax==1.6.1\""
# Craftax's envs (Matthews et al., 2024): the full game and Crafter's port (Classic), each with a
# symbolic observation (a flat vector) or pixels; made without Craftax's own auto-reset, so that
# the loop's reset keeps each episode's final observation
CRAFTAX_IDS = ("Craftax-Symbolic-v1", "Craftax-Pixels-v1", "Craftax-Classic-Symbolic-v1", "Craftax-Classic-Pixels-v1")


@runtime_checkable
class JaxEnv(Protocol):
    """gymnax's functional env API (module docstring)."""

    @property
    def default_params(self) -> Any: ...

    def reset(self, key: jax.Array, params: Any) -> tuple[Any, Any]: ...

    def step(self, key: jax.Array, state: Any, action: jax.Array, params: Any) -> tuple[Any, ...]: ...

    def observation_space(self, params: Any) -> Any: ...

    def action_space(self, params: Any) -> Any: ...


def is_jax_env(env_id: str) -> bool:
    """Whether ``env_id`` names a JAX env source (``gymnax:<Id>``, ``brax:<name>``, ``craftax:<Id>``,
    ``jaxmarl:<Name>``)."""
    return isinstance(env_id, str) and env_id.partition(":")[0] in SOURCES and ":" in env_id


# What gymnax's registry imports at its modules' tops only to draw (its Pong's and its bsuite envs'
# renderers): seaborn (and with it scipy and pandas) and matplotlib's pyplot, ~1.5 s of a 2 s
# ``import gymnax`` on 2 cores, before the first env step of every run.
GYMNAX_DRAWING_MODULES = ("seaborn", "matplotlib.pyplot")


class _DeferredModule(types.ModuleType):
    """Stands in ``sys.modules`` for a module not yet imported: the first attribute read imports
    the real one (which then replaces this in ``sys.modules`` and on its parent package) and every
    read goes to it. ``__name__`` and ``__spec__`` are its own, so that the import system and
    ``importlib.util.find_spec`` see an imported module."""

    def __getattr__(self, attribute: str) -> Any:
        name = self.__name__
        module = sys.modules.get(name)
        if module is None or module is self:
            sys.modules.pop(name, None)
            module = importlib.import_module(name)  # (a dotted name's parent gets it as its attribute)
        return getattr(module, attribute)


def defer_import(name: str) -> None:
    """Makes ``import name`` free until the module is used: ``name`` is registered with a stand-in
    whose first attribute read imports the real module, for whoever reads it. Nothing happens
    where ``name`` is already imported or not installed."""
    if name in sys.modules:
        return
    try:
        spec = importlib.util.find_spec(name)  # (imports the parent package of a dotted name)
    except (ImportError, ValueError):
        return
    if spec is None:
        return
    stand_in = _DeferredModule(name)
    stand_in.__spec__ = spec
    sys.modules[name] = stand_in
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, stand_in)


def _gymnax() -> Any:
    if "gymnax" not in sys.modules:
        for name in GYMNAX_DRAWING_MODULES:
            defer_import(name)
    try:
        import gymnax  # lazy: optional extra (gymnax), installed --no-deps
    except ImportError:
        raise ValueError(f"gymnax envs need the 'gymnax' extra, which is not installed; run {INSTALL}") from None
    return gymnax


def _craftax() -> Any:
    try:
        import craftax.craftax_env  # lazy: optional extra (craftax), installed --no-deps
    except ImportError:
        raise ValueError(
            f"craftax envs need the 'craftax' extra, which is not installed; run {CRAFTAX_INSTALL}"
        ) from None
    return craftax.craftax_env


def check_jax_env_id(env_id: str) -> None:
    """Raises a one-line ``ValueError`` for an id its source (gymnax, Brax, Craftax, JaxMARL) does
    not register (naming close matches), or where the source is not installed."""
    source, _, name = env_id.partition(":")
    if source == "jaxmarl":
        from shoal.envs.jaxmarl_envs import check_jaxmarl_name  # (it subclasses this module's JaxVectorEnv)

        check_jaxmarl_name(name)
        return
    if source == "brax":
        known = brax_env_names()
    elif source == "craftax":
        _craftax()
        known = list(CRAFTAX_IDS)
    else:
        known = list(_gymnax().registered_envs)
    if name not in known:
        close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
        hint = f"; did you mean {', '.join(f'{source}:{c}' for c in close)}?" if close else ""
        raise ValueError(f"unknown {source} environment id {name!r}{hint} ({source} registers {', '.join(known)})")


def make_jax_env(env_id: str, env_args: Mapping[str, Any] | None = None) -> tuple[Any, Any]:
    """``(env, params)`` of a JAX env id; ``env_args`` replace fields of the env's params
    (``--env-arg max_steps_in_episode=200``), each checked against them in one line (a Brax env:
    ``backend`` and ``episode_length``, ``brax_envs.make_brax_env``; a JaxMARL env: one copy of
    it, all its agents, with ``params`` ``None`` and ``env_args`` its constructor's: step it with
    ``make_jax_vector_env``, which lays its agents out as rows)."""
    check_jax_env_id(env_id)
    source, _, name = env_id.partition(":")
    if source == "jaxmarl":
        from shoal.envs.jaxmarl_envs import make_jaxmarl_env

        return make_jaxmarl_env(name, env_args), None
    if source == "brax":
        return make_brax_env(name, env_args)
    if source == "craftax":
        env = _craftax().make_craftax_env_from_name(name, auto_reset=False)
        params = env.default_params
    else:
        env, params = _gymnax().make(name)
    if env_args:
        fields = list(getattr(params, "__dataclass_fields__", {}))
        unknown = [key for key in env_args if key not in fields]
        if unknown:
            raise ValueError(
                f"{env_id} has no parameter {', '.join(unknown)}; --env-arg sets its params: {', '.join(fields)}"
            )
        params = params.replace(**env_args)
    return env, params


def make_jax_vector_env(
    env_id: str,
    env_args: Mapping[str, Any] | None,
    num_envs: int,
    agent_ids: bool = True,
    global_state: bool = False,
) -> JaxVectorEnv:
    """The vector env the compiled loop (and ``JaxGymVectorEnv``) steps for a JAX env id:
    ``num_envs`` copies of it; a JaxMARL env's copies with a row per agent
    (``shoal.envs.jaxmarl_envs.AgentRows``: ``num_envs * agents`` rows, each row's identity in
    its observation where ``agent_ids``, the copy's global state where ``global_state``)."""
    env, params = make_jax_env(env_id, env_args)
    if env_id.partition(":")[0] == "jaxmarl":
        from shoal.envs.jaxmarl_envs import AgentRows

        return AgentRows(env, num_envs, agent_ids, global_state)
    return JaxVectorEnv(env, num_envs, params)


def gym_space(space: Any, what: str) -> gym.Space:
    """A gymnax (or gymnasium) ``Box``/``Discrete`` space as gymnasium's; one line for any other."""
    if isinstance(space, gym.spaces.Box | gym.spaces.Discrete):
        return space
    kind = type(space).__name__
    if kind == "Discrete" and hasattr(space, "n"):
        return gym.spaces.Discrete(int(space.n))
    if kind == "Box" and hasattr(space, "shape"):
        shape = tuple(int(d) for d in space.shape)
        dtype = np.dtype(space.dtype)
        low = np.broadcast_to(np.asarray(space.low, dtype), shape)
        high = np.broadcast_to(np.asarray(space.high, dtype), shape)
        return gym.spaces.Box(low, high, shape, dtype)
    raise ValueError(f"{what} space {space!r} ({kind}) is not supported; Shoal maps Box and Discrete spaces")


def jax_environment_spec(env: Any, params: Any, num_envs: int) -> EnvironmentSpec:
    """The ``EnvironmentSpec`` of ``num_envs`` copies of ``env``: a Box observation (or a flat
    Dict of them), Discrete or Box actions; one-line ``ValueError`` otherwise (a Discrete
    observation, as gymnax's ``FrozenLake-misc`` has, included: one-hot it in the env)."""
    observation = gym_space(env.observation_space(params), "observation")
    if isinstance(observation, gym.spaces.Discrete):
        raise ValueError(
            f"observation space {observation} is Discrete; the compiled loop takes Box observations "
            "(one-hot encode them in the env)"
        )
    action = gym_space(env.action_space(params), "action")
    return make_environment_spec(_Spaces(observation, action), num_envs)


class _Spaces:
    def __init__(self, observation_space: gym.Space, action_space: gym.Space) -> None:
        self.observation_space, self.action_space = observation_space, action_space


def reward_threshold(env_id: str) -> float | None:
    """The return that counts as solved: gymnasium's ``reward_threshold`` for a gymnax env that
    is a port of a gymnasium one under the same id (``CartPole-v1``: 475), else ``None``."""
    name = env_id.partition(":")[2]
    return gym.spec(name).reward_threshold if name in gym.registry else None


class EnvState(NamedTuple):
    """The vector env's state: the envs' own, and each env's running episode return and length."""

    env: Any
    episode_return: jax.Array  # [N] float32
    episode_length: jax.Array  # [N] int32


class Step(NamedTuple):
    """One vector step, ``[N, ...]`` each: what PPO's batch needs and the episode statistics."""

    observation: Any  # the next observation (after a reset, where the episode ended)
    final_observation: Any  # the observation the step ended in (before any reset)
    reward: jax.Array
    terminated: jax.Array
    truncated: jax.Array
    episode_return: jax.Array  # the return of the episode that ended here (0 elsewhere)
    episode_length: jax.Array  # its length (0 elsewhere)


class JaxVectorEnv:
    """``num_envs`` copies of a ``JaxEnv``, stepped with ``vmap``, reset where an episode ends.

    Pure functions (to call under ``jit``): ``reset(key) -> (obs, EnvState)`` with ``key`` one
    key for all envs, ``step(key, state, action) -> (EnvState, Step)``.
    """

    num_agents = 1  # (rows per copy of the env: a JaxMARL env's ``AgentRows`` has one per agent)
    agents: list[str] | None = None  # (their names, where an env has several)

    def __init__(self, env: Any, num_envs: int, params: Any = None) -> None:
        self.env, self.num_envs = env, int(num_envs)
        self.params = env.default_params if params is None else params
        self.spec = jax_environment_spec(env, self.params, num_envs)
        gymnax_env = type(env).__module__.startswith("gymnax.")
        self.auto_resets = bool(getattr(env, "auto_resets", gymnax_env))
        space = self.spec.action_space
        self._bounds = (space.low, space.high) if isinstance(space, gym.spaces.Box) else None

    def reset(self, key: jax.Array, num_envs: int | None = None) -> tuple[Any, EnvState]:
        n = self.num_envs if num_envs is None else num_envs
        obs, state = jax.vmap(self.env.reset, (0, None))(jax.random.split(key, n), self.params)
        return obs, EnvState(state, jnp.zeros(n, jnp.float32), jnp.zeros(n, jnp.int32))

    def _step_one(self, key: jax.Array, state: Any, action: jax.Array) -> tuple[Any, ...]:
        step_key, reset_key = jax.random.split(key)
        if self._bounds is not None:
            action = jnp.clip(action, *self._bounds)
        out = self.env.step(step_key, state, action, self.params)
        if len(out) == 6:
            obs, next_state, reward, terminated, truncated, info = out
        else:
            obs, next_state, reward, done, info = out
            truncated = jnp.asarray(info.get("truncated", False), bool) if isinstance(info, Mapping) else False
            terminated = jnp.logical_and(done, jnp.logical_not(truncated))
        terminated, truncated = jnp.asarray(terminated, bool), jnp.asarray(truncated, bool)
        done = jnp.logical_or(terminated, truncated)
        final = info.get("final_observation", obs) if isinstance(info, Mapping) and self.auto_resets else obs
        if not self.auto_resets:
            reset_obs, reset_state = self.env.reset(reset_key, self.params)
            pick = lambda a, b: jax.lax.select(jnp.broadcast_to(done, jnp.shape(a)), a, b)  # noqa: E731
            obs = jax.tree_util.tree_map(pick, reset_obs, obs)
            next_state = jax.tree_util.tree_map(pick, reset_state, next_state)
        return obs, final, next_state, jnp.asarray(reward, jnp.float32), terminated, truncated

    def step(self, key: jax.Array, state: EnvState, action: jax.Array) -> tuple[EnvState, Step]:
        n = state.episode_return.shape[0]
        obs, final, env_state, reward, terminated, truncated = jax.vmap(self._step_one)(
            jax.random.split(key, n), state.env, action
        )
        done = jnp.logical_or(terminated, truncated)
        episode_return = state.episode_return + reward
        episode_length = state.episode_length + 1
        step = Step(
            obs,
            final,
            reward,
            terminated,
            truncated,
            jnp.where(done, episode_return, 0.0),
            jnp.where(done, episode_length, 0),
        )
        kept = jnp.logical_not(done)
        return EnvState(env_state, episode_return * kept, episode_length * kept), step


class JaxGymVectorEnv(gym.vector.VectorEnv):
    """``num_envs`` copies of a JAX env as a gymnasium vector env, for the replay-backed actors
    (so that a JAX env runs both ways, and the two architectures can be set side by side on one
    task): each ``step`` is one jitted ``JaxVectorEnv.step``, its arrays copied to the host, with
    gymnasium's ``SAME_STEP`` autoreset (``info["final_obs"]`` where an episode ended), as Shoal's
    other vector envs. ``reset(seed=s)`` draws every env's start from ``PRNGKey(s)``."""

    metadata = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}

    def __init__(self, env: Any, params: Any, num_envs: int, venv: JaxVectorEnv | None = None) -> None:
        self._venv = JaxVectorEnv(env, num_envs, params) if venv is None else venv  # (venv: JaxMARL's rows)
        self.num_envs = num_envs = self._venv.num_envs
        self.single_observation_space = self._venv.spec.observation_space
        self.single_action_space = self._venv.spec.action_space
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, num_envs)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, num_envs)
        self._reset, self._step = jax.jit(self._venv.reset), jax.jit(self._venv.step)
        self._key, self._state = jax.random.PRNGKey(0), None
        self._action_dtype = self._venv.spec.action.dtype

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        if seed is not None:
            self._key = jax.random.PRNGKey(seed)
            self.action_space.seed(seed)
        self._key, key = jax.random.split(self._key)
        observation, self._state = self._reset(key)
        return jax.tree_util.tree_map(np.asarray, observation), {}

    def step(self, actions: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict]:
        self._key, key = jax.random.split(self._key)
        self._state, step = self._step(key, self._state, jnp.asarray(np.asarray(actions, self._action_dtype)))
        step = jax.device_get(step)
        terminated, truncated = np.asarray(step.terminated), np.asarray(step.truncated)
        ended = terminated | truncated
        info: dict[str, Any] = {}
        if ended.any():
            final = np.empty(self.num_envs, object)
            for i in ended.nonzero()[0]:
                final[i] = jax.tree_util.tree_map(lambda x, i=i: np.asarray(x[i]), step.final_observation)
            info["final_obs"], info["_final_obs"] = final, ended.copy()
            info["final_info"], info["_final_info"] = {}, ended.copy()
        reward = np.asarray(step.reward, np.float64)
        observation = jax.tree_util.tree_map(np.asarray, step.observation)  # (a Dict's: a dict of arrays)
        return observation, reward, terminated, truncated, info
