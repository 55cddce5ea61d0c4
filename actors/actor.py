"""The generic batched actor: one jitted policy call per vector step, for all envs at once."""

from __future__ import annotations

from typing import Mapping

import jax
import numpy as np

from shoal.actors.variable_client import VariableClient
from shoal.core.interfaces import Actor, Adder, Saveable
from shoal.core.types import ActorInfo, Policy, Step


class BatchedActor(Actor, Saveable):
    """Acts for a whole vector env with one jitted ``policy.apply``, and feeds an adder (if any).

    The policy gets an ``ActorInfo``: the env steps this actor took so far (so schedules such
    as epsilon decay live inside the jitted function; ``env_steps_offset`` lets a restarted
    actor continue its schedule) and the version of the params it acts with (so an on-policy
    agent can record it in its extras).

    It acts on ``device``, by default the CPU, where the params and the key are placed (and so
    the policy runs): a policy over a few envs is latency-bound, and on a machine with a GPU
    the learner's, it would otherwise round-trip to the GPU every step.

    A recurrent policy (``policy.initial_state``) gets the state it returned at the last step,
    and fresh rows for the envs whose episode ended since (``end_episodes``, which ``observe``
    calls with the step's ``terminated | truncated``: autoreset is same-step, so the next
    observation of such an env is its new episode's first). Feed-forward policies pay nothing.
    """

    def __init__(self, policy: Policy, key: jax.Array, variable_client: VariableClient,
                 adder: Adder | None = None, num_envs: int = 1, env_steps_offset: int = 0,
                 device: jax.Device | None = None) -> None:
        self._apply = jax.jit(policy.apply)
        self._device = device or cpu_device()
        self._key = jax.device_put(key, self._device)
        self._client = variable_client
        self._adder = adder
        self._num_envs = num_envs
        self._offset = env_steps_offset
        self.steps = 0  # vector steps taken
        self._device_params, self._device_version = None, None
        self._state = self._fresh = None
        if policy.initial_state is not None:
            self._fresh = jax.device_put(policy.initial_state(num_envs), self._device)  # (kept: rows to reset from)
            self._state = self._fresh
            self._reset = jax.jit(_reset_rows)

    def select_action(self, observation: np.ndarray) -> tuple[np.ndarray, Mapping[str, np.ndarray]]:
        if self._device_version != self._client.version:  # one host->device copy per version
            self._device_params = jax.device_put(self._client.params, self._device)
            self._device_version = self._client.version
        info = ActorInfo(self._offset + self.steps * self._num_envs, self._client.version)
        if self._state is None:
            actions, extras, self._key = self._apply(self._device_params, self._key, observation, info)
        else:
            actions, extras, self._key, self._state = self._apply(self._device_params, self._key, observation,
                                                                  info, self._state)
        return jax.device_get((actions, extras))  # one transfer for actions and extras

    def end_episodes(self, ended: np.ndarray) -> None:
        if self._state is not None and np.any(ended):
            self._state = self._reset(self._state, self._fresh, jax.device_put(np.asarray(ended, bool), self._device))

    def observe(self, step: Step) -> None:
        self.steps += 1
        if self._state is not None:  # (a feed-forward policy's step does no more than before)
            self.end_episodes(np.asarray(step.terminated) | np.asarray(step.truncated))
        if self._adder is not None:
            self._adder.add(step)

    def update(self, wait: bool = False) -> None:
        if wait:
            self._client.update_and_wait()
        else:
            self._client.update()

    @property
    def params_version(self) -> int:
        return self._client.version

    def save(self) -> dict:
        """Where the actor's schedules stand (env steps taken) and its RNG key."""
        return {"env_steps": int(self._offset + self.steps * self._num_envs),
                "key": np.asarray(jax.random.key_data(self._key) if jax.dtypes.issubdtype(
                    self._key.dtype, jax.dtypes.prng_key) else self._key).tolist()}

    def restore(self, state: dict) -> None:
        self._offset, self.steps = int(state["env_steps"]), 0
        self._key = jax.device_put(np.asarray(state["key"], np.uint32), self._device)


def _reset_rows(state, fresh, ended):
    """``state`` with the rows of the envs in ``ended`` (``[num_envs]`` bool) taken from ``fresh``."""
    return jax.tree_util.tree_map(
        lambda s, f: jax.numpy.where(ended.reshape(-1, *([1] * (s.ndim - 1))), f, s), state, fresh)


def cpu_device() -> jax.Device | None:
    """This process's CPU device (``None`` where JAX was started without one)."""
    try:
        return jax.devices("cpu")[0]
    except RuntimeError:
        return None
