"""Brax's environments (``--env brax:halfcheetah``, ``brax:ant``, ...) as JAX envs with gymnax's
functional API, for the compiled loop (``--launcher anakin``) and, wrapped, the replay-backed actors.

Brax (Google's differentiable physics in JAX) steps its envs with one of its pipelines, chosen by
``--env-arg backend=NAME``: ``mjx`` (MuJoCo's own JAX port, MJX), ``generalized``, ``positional``
or ``spring`` (Brax's three; each env has a default, ``generalized`` for most). ``BraxEnv`` adapts
``brax.envs.get_environment(name, backend=...)``: its ``reset(key)``/``step(state, action)`` on
Brax's ``State`` become gymnax's ``reset(key, params) -> (obs, state)`` and ``step(key, state,
action, params) -> (obs, state, reward, terminated, truncated, info)``:

* **terminated** is Brax's ``done`` (a hopper that fell; halfcheetah never terminates);
* **truncated** is the time limit Brax's training wrapper adds: ``params.episode_length`` steps
  (1,000 by default, as Brax's and MuJoCo's benchmarks use; ``--env-arg episode_length=N``), where
  the episode did not terminate -- bootstrapped by the agents, not terminal;
* the reset after either is ``JaxVectorEnv``'s (``auto_resets`` is ``False``);
* observations are ``Box(-inf, inf, (observation_size,), float32)``, actions ``Box(-1, 1,
  (action_size,), float32)`` (Brax's actuators are scaled to [-1, 1]).

Brax is the ``brax`` extra, Python 3.12+ (its releases ask for JAX >= 0.10 and numpy 2; on the
Python 3.11 stack, Reverb's numpy 1 and JAX 0.4.34, pip would replace both):
``pip install -e '.[brax]'``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np

INSTALL = "pip install -e '.[brax]' (Python 3.12+)"
BACKENDS = ("mjx", "generalized", "positional", "spring")
# Brax envs that do not run on the JAX Shoal installs, and why (checked by tracing every
# registered env's reset and step with jax.eval_shape on Brax 0.14.2 and JAX 0.12)
BROKEN = {"swimmer": "Brax 0.14's swimmer calls jnp.clip(a_min=...), which JAX 0.12 removed"}


@dataclasses.dataclass(frozen=True)
class BraxParams:
    """A Brax env's parameters: the time limit (a static pytree node, no leaves: a change
    compiles the step again)."""

    episode_length: int = 1000

    def replace(self, **changes: Any) -> BraxParams:
        return dataclasses.replace(self, **changes)


jax.tree_util.register_pytree_node(
    BraxParams, lambda params: ((), params.episode_length), lambda length, _: BraxParams(length)
)


def _brax_envs() -> Any:
    try:
        import brax.envs  # lazy: optional extra (brax), Python 3.12+
    except ImportError:
        raise ValueError(f"brax envs need the 'brax' extra, which is not installed; run {INSTALL}") from None
    return brax.envs


def brax_env_names() -> list[str]:
    """The env names Brax registers (``ant``, ``halfcheetah``, ...)."""
    return sorted(_brax_envs()._envs)  # (Brax keeps its registry as a module-level dict)


class BraxEnv:
    """A Brax env with gymnax's functional API (module docstring)."""

    auto_resets = False

    def __init__(self, name: str, backend: str | None = None) -> None:
        kwargs = {} if backend is None else {"backend": backend}
        self.name, self.brax_env = name, _brax_envs().get_environment(name, **kwargs)

    @property
    def default_params(self) -> BraxParams:
        return BraxParams()

    def reset(self, key: jax.Array, params: BraxParams) -> tuple[jax.Array, tuple[Any, jax.Array]]:
        state = self.brax_env.reset(key)
        return state.obs, (state, jnp.zeros((), jnp.int32))

    def step(
        self, key: jax.Array, state: tuple[Any, jax.Array], action: jax.Array, params: BraxParams
    ) -> tuple[Any, ...]:
        brax_state, steps = state
        brax_state = self.brax_env.step(brax_state, action)
        steps = steps + 1
        terminated = brax_state.done > 0
        truncated = jnp.logical_and(steps >= params.episode_length, jnp.logical_not(terminated))
        return brax_state.obs, (brax_state, steps), brax_state.reward, terminated, truncated, {}

    def observation_space(self, params: BraxParams) -> gym.spaces.Box:
        size = int(self.brax_env.observation_size)
        return gym.spaces.Box(-np.inf, np.inf, (size,), np.float32)

    def action_space(self, params: BraxParams) -> gym.spaces.Box:
        return gym.spaces.Box(-1.0, 1.0, (int(self.brax_env.action_size),), np.float32)


def make_brax_env(name: str, env_args: Mapping[str, Any] | None = None) -> tuple[BraxEnv, BraxParams]:
    """``(BraxEnv, BraxParams)`` for a Brax env name; ``env_args``: ``backend`` (one of
    ``BACKENDS``) and ``episode_length`` (a positive int), each checked in one line, as is an
    env of ``BROKEN``."""
    if name in BROKEN:
        raise ValueError(f"brax:{name} does not run here: {BROKEN[name]}")
    args = dict(env_args or {})
    unknown = sorted(set(args) - {"backend", "episode_length"})
    if unknown:
        raise ValueError(
            f"brax:{name} has no parameter {', '.join(unknown)}; --env-arg sets backend ({'|'.join(BACKENDS)}) "
            "and episode_length"
        )
    backend = args.get("backend")
    if backend is not None and backend not in BACKENDS:
        raise ValueError(f"brax:{name}: backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    length = args.get("episode_length", BraxParams().episode_length)
    if isinstance(length, bool) or not isinstance(length, int) or length < 1:
        raise ValueError(f"brax:{name}: episode_length must be a positive integer, got {length!r}")
    return BraxEnv(name, backend), BraxParams(episode_length=length)


__all__ = ["BACKENDS", "BROKEN", "INSTALL", "BraxEnv", "BraxParams", "brax_env_names", "make_brax_env"]
