"""``N`` copies of a JAX env with gymnax's functional API, stepped as one vector env under
``jit``: ``JaxVectorEnv`` (``reset(key) -> (obs, EnvState)``, ``step(key, state, action) ->
(EnvState, Step)``, reset where an episode ends, each env's episode return and length kept), and
the spec of such an env (gymnax's spaces as gymnasium's). The sources that make the envs
(``shoal.envs.jax_envs``: gymnax, Brax, Craftax; ``shoal.envs.jaxmarl_envs``: JaxMARL's, with
agents as rows, a subclass) import this module; it imports none of them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np

from shoal.core.specs import EnvironmentSpec, make_environment_spec


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
        return counted_step(state, env_state, obs, final, reward, terminated, truncated)


def counted_step(
    state: EnvState,
    env_state: Any,
    obs: Any,
    final: Any,
    reward: jax.Array,
    terminated: jax.Array,
    truncated: jax.Array,
) -> tuple[EnvState, Step]:
    """A vector step's ``(EnvState, Step)`` from what the envs gave (``[N]`` each): each env's
    running episode return and length counted on, reported where its episode ended and then
    started again from zero."""
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
