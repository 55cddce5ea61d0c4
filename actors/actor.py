"""The generic batched actor: one jitted policy call per vector step, for all envs at once."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import jax
import numpy as np

from shoal.actors.variable_client import VariableClient
from shoal.core.interfaces import Actor, Adder, Saveable
from shoal.core.timing import Stopwatch
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

    ``observe(step, next_observation)`` starts the next action's computation before the adder
    writes (``EnvironmentLoop`` does, for an actor whose ``prefetches`` is true): the step's write and the
    policy's computation overlap, and an actor's loop spends about a quarter less time per vector
    step (``benchmarks/throughput.py``). The action is the one ``select_action`` would compute
    then: same key, state and env-step count, and the params of that moment (it is computed
    again if they changed).
    """

    prefetches = True  # (``observe`` takes the next observation: ``EnvironmentLoop`` gives it)

    def __init__(
        self,
        policy: Policy,
        key: jax.Array,
        variable_client: VariableClient,
        adder: Adder | None = None,
        num_envs: int = 1,
        env_steps_offset: int = 0,
        device: jax.Device | None = None,
    ) -> None:
        self._device = device or cpu_device()
        self._on_cpu = self._device is not None and self._device.platform == "cpu"
        self._apply = ClassicCpuJit(policy.apply) if self._on_cpu else jax.jit(policy.apply)
        self._key = jax.device_put(key, self._device)
        self._client = variable_client
        self._adder = adder
        self._num_envs = num_envs
        self._offset = env_steps_offset
        self.steps = 0  # vector steps taken
        self._device_params: Any = None
        self._device_version: int | None = None
        self._state = self._fresh = None
        self._pending: _Pending | None = None  # (an action prefetched by ``observe``)
        if policy.initial_state is not None:
            self._fresh = jax.device_put(policy.initial_state(num_envs), self._device)  # (kept: rows to reset from)
            self._state = self._fresh
            self._reset = jax.jit(_reset_rows)

    def select_action(self, observation: np.ndarray) -> tuple[np.ndarray, Mapping[str, np.ndarray]]:
        pending, self._pending = self._pending, None
        if pending is None or pending.observation is not observation or pending.version != self._client.version:
            pending = self._dispatch(observation)  # (no prefetch, or one for other inputs: computed now)
        self._key = pending.key
        if pending.state is not None:
            self._state = pending.state
        if self._on_cpu:  # (an array on the CPU reads as a NumPy array without a copy)
            return np.asarray(pending.actions), jax.tree_util.tree_map(np.asarray, pending.extras)
        return jax.device_get((pending.actions, pending.extras))  # one transfer for actions and extras

    def _dispatch(self, observation) -> _Pending:
        """Starts the policy on ``observation`` (JAX dispatches it asynchronously: this returns
        while the computation runs); nothing of the actor changes until ``select_action`` takes it."""
        if self._device_version != self._client.version:  # one host->device copy per version
            self._device_params = jax.device_put(self._client.params, self._device)
            self._device_version = self._client.version
        info = ActorInfo(self._offset + self.steps * self._num_envs, self._client.version)
        if self._state is None:
            actions, extras, key = self._apply(self._device_params, self._key, observation, info)
            state = None
        else:
            actions, extras, key, state = self._apply(self._device_params, self._key, observation, info, self._state)
        return _Pending(observation, self._device_version, actions, extras, key, state)

    def end_episodes(self, ended: np.ndarray) -> None:
        if self._state is not None and np.any(ended):
            self._state = self._reset(self._state, self._fresh, jax.device_put(np.asarray(ended, bool), self._device))
            self._pending = None  # (computed from the states before the reset)

    def observe(
        self,
        step: Step,
        next_observation: np.ndarray | None = None,
        stopwatch: Stopwatch | None = None,
        before_write: Callable[[], None] | None = None,
    ) -> None:
        """Records ``step`` and hands it to the adder. With ``next_observation`` (the array the
        next ``select_action`` will be given) it first starts the policy on it, so that the
        policy computes while the adder writes (``select_action`` then only collects the
        actions; it computes them again if the params changed in between). ``stopwatch`` times
        that start as ``policy``. ``before_write`` is called after that start and before the
        adder writes (``EnvironmentLoop``'s overlap: it takes the actions and sends them to the
        env, which steps while the adder writes)."""
        self.steps += 1
        if self._state is not None:  # (a feed-forward policy's step does no more than before)
            self.end_episodes(np.asarray(step.terminated) | np.asarray(step.truncated))
        if next_observation is not None:
            with stopwatch.time("policy") if stopwatch is not None else contextlib.nullcontext():
                self._pending = self._dispatch(next_observation)
        if before_write is not None:
            before_write()
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
        return {
            "env_steps": int(self._offset + self.steps * self._num_envs),
            "key": np.asarray(
                jax.random.key_data(self._key)
                if jax.dtypes.issubdtype(self._key.dtype, jax.dtypes.prng_key)
                else self._key
            ).tolist(),
        }

    def restore(self, state: dict) -> None:
        self._offset, self.steps = int(state["env_steps"]), 0
        self._key = jax.device_put(np.asarray(state["key"], np.uint32), self._device)
        self._pending = None


class ClassicCpuJit:
    """``jax.jit(fn)``, compiled for XLA's classic CPU runtime (one compiled function, where the
    default thunk runtime runs each operation as a task of its own), which runs a policy about
    1.7x faster (the DQN policy over 16 CartPole envs: 154 -> 89 us; over 8 Atari frames: 4.7
    -> 3.6 ms). Compiled at the first call, and again for arguments of other shapes. A JAX whose
    XLA has no such option gets plain ``jax.jit``. (Actors only: the classic runtime cannot take
    the gradient of a convolution in jaxlib 0.4.34.)"""

    OPTIONS = {"xla_cpu_use_thunk_runtime": False}

    def __init__(self, fn: Callable) -> None:
        self._jit = jax.jit(fn)
        self._compiled: Any = None
        self._classic = True

    def __call__(self, *args):
        if self._compiled is not None:
            try:
                return self._compiled(*args)
            except TypeError:  # (arguments of other shapes or types than it was compiled for)
                pass
        if self._classic:
            try:
                self._compiled = self._jit.lower(*args).compile(compiler_options=self.OPTIONS)
                return self._compiled(*args)
            except Exception:  # noqa: BLE001 -- (an XLA without the option: the default runtime)
                self._classic, self._compiled = False, None
        return self._jit(*args)


class _Pending(NamedTuple):
    """A policy call started on ``observation`` with params ``version``: its outputs (JAX
    arrays, perhaps still being computed), the next RNG key and recurrent state."""

    observation: Any
    version: Any
    actions: Any
    extras: Any
    key: Any
    state: Any


def _reset_rows(state, fresh, ended):
    """``state`` with the rows of the envs in ``ended`` (``[num_envs]`` bool) taken from ``fresh``."""
    return jax.tree_util.tree_map(
        lambda s, f: jax.numpy.where(ended.reshape(-1, *([1] * (s.ndim - 1))), f, s), state, fresh
    )


def cpu_device() -> jax.Device | None:
    """This process's CPU device (``None`` where JAX was started without one)."""
    try:
        return jax.devices("cpu")[0]
    except RuntimeError:
        return None
