"""The generic batched actor: one jitted policy call per vector step, for all envs at once."""

from __future__ import annotations

from typing import Any, Callable

import jax
import numpy as np

from shoal.actors.variable_client import VariableClient
from shoal.core.interfaces import Actor, Adder

# policy(params, key, observations[num_envs, ...], actor_step) -> (actions[num_envs], new_key)
Policy = Callable[[Any, jax.Array, jax.Array, jax.Array], tuple[jax.Array, jax.Array]]


class BatchedActor(Actor):
    """Acts for a whole vector env with one jitted call, and feeds an adder (if any).

    ``actor_step`` (the number of vector steps taken so far) is passed to the policy so that
    schedules such as epsilon decay live inside the jitted function.
    """

    def __init__(self, policy: Policy, key: jax.Array, variable_client: VariableClient,
                 adder: Adder | None = None, num_envs_per_step: int = 1) -> None:
        self._policy = jax.jit(policy)
        self._key = key
        self._client = variable_client
        self._adder = adder
        self._num_envs = num_envs_per_step
        self.steps = 0  # vector steps taken
        self._device_params, self._device_version = None, None

    def select_action(self, observation: np.ndarray) -> np.ndarray:
        if self._device_version != self._client.version:  # one host->device copy per version
            self._device_params = jax.device_put(self._client.params)
            self._device_version = self._client.version
        actions, self._key = self._policy(self._device_params, self._key, observation,
                                          self.steps * self._num_envs)
        return np.asarray(actions)

    def observe(self, observation, action, reward, terminated, truncated, next_observation) -> None:
        self.steps += 1
        if self._adder is not None:
            self._adder.add(observation, action, reward, terminated, truncated, next_observation)

    def update(self, wait: bool = False) -> None:
        if wait:
            self._client.update_and_wait()
        else:
            self._client.update()

    @property
    def params_version(self) -> int:
        return self._client.version
