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

gymnax's MinAtar games (``gymnax:<Game>-MinAtar``) are given MinAtar's own observations
(``MinAtarPlanes``: uint8 ``[C, H, W]`` frames, as ``MinAtar/<Game>-v1`` gives them), so that
the agents' torsos read them alike.

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
from typing import Any, Protocol, runtime_checkable

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np

from shoal.envs.brax_envs import brax_env_names, make_brax_env
from shoal.envs.jax_vector import JaxVectorEnv
from shoal.envs.jaxmarl_envs import AgentRows, check_jaxmarl_name, make_jaxmarl_env

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
        return make_jaxmarl_env(name, env_args), None
    if source == "brax":
        return make_brax_env(name, env_args)
    if source == "craftax":
        env = _craftax().make_craftax_env_from_name(name, auto_reset=False)
        params = env.default_params
    else:
        env, params = _gymnax().make(name)
        if name.endswith("-MinAtar"):
            env = MinAtarPlanes(env)
    if env_args:
        fields = list(getattr(params, "__dataclass_fields__", {}))
        unknown = [key for key in env_args if key not in fields]
        if unknown:
            raise ValueError(
                f"{env_id} has no parameter {', '.join(unknown)}; --env-arg sets its params: {', '.join(fields)}"
            )
        params = params.replace(**env_args)
    return env, params


class MinAtarPlanes:
    """A gymnax MinAtar game whose observations are the uint8 ``[C, H, W]`` planes in {0, 1} that
    MinAtar's own games give Shoal's agents (``shoal.envs.observations.BinaryPlanes``), not
    gymnax's float32 ``[H, W, C]``: so that the MinAtar presets' convolutional torso reads them
    (``torso=auto`` picks it, as for ``MinAtar/<Game>-v1``) and replay holds a byte per cell. The
    values are the same; only their order and dtype differ (an MLP torso reads them flattened in
    channel-first order). Everything else is gymnax's env (``auto_resets`` as gymnax's)."""

    auto_resets = True

    def __init__(self, env: Any) -> None:
        self.env = env

    def __getattr__(self, name: str) -> Any:  # (default_params, num_actions, name, ...: gymnax's)
        if name == "env" or name.startswith("__"):  # (copy and pickle ask before ``env`` is set)
            raise AttributeError(name)
        return getattr(self.env, name)

    @staticmethod
    def planes(observation: jax.Array) -> jax.Array:
        """``[..., H, W, C]`` planes in [0, 1] -> uint8 ``[..., C, H, W]``."""
        return jnp.moveaxis(jnp.asarray(observation > 0, jnp.uint8), -1, -3)

    def reset(self, key: jax.Array, params: Any) -> tuple[jax.Array, Any]:
        observation, state = self.env.reset(key, params)
        return self.planes(observation), state

    def step(self, key: jax.Array, state: Any, action: jax.Array, params: Any) -> tuple[Any, ...]:
        observation, *rest, info = self.env.step(key, state, action, params)
        if isinstance(info, Mapping) and "final_observation" in info:
            info = {**info, "final_observation": self.planes(info["final_observation"])}
        return (self.planes(observation), *rest, info)

    def observation_space(self, params: Any) -> gym.spaces.Box:
        height, width, channels = (int(d) for d in self.env.observation_space(params).shape)
        return gym.spaces.Box(0, 1, (channels, height, width), np.uint8)

    def action_space(self, params: Any) -> Any:
        return self.env.action_space(params)


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
        return AgentRows(env, num_envs, agent_ids, global_state)
    return JaxVectorEnv(env, num_envs, params)


def reward_threshold(env_id: str) -> float | None:
    """The return that counts as solved: gymnasium's ``reward_threshold`` for a gymnax env that
    is a port of a gymnasium one under the same id (``CartPole-v1``: 475), else ``None``."""
    name = env_id.partition(":")[2]
    return gym.spec(name).reward_threshold if name in gym.registry else None


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
