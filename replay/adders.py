"""Adders: an actor's vector steps -> replay items, written batched (one item per vector step or
chunk, never one per env per step) through one writer of the run's replay backend.

**N-step transitions** (``NStepTransitionAdder``). For a step ``t`` of one env, with
``m = min(n, steps until its episode ends, inclusive)``:

    reward   = sum_{k=0}^{m-1} gamma^k * r_{t+k}
    discount = gamma^m * (1 - terminated_{t+m-1})
    next_observation = o_{t+m}   (the *final* observation if the episode ended at t+m-1)
    extras   = the extras of step t

so a terminated episode does not bootstrap, and a truncated one (time limit) does, from its
final observation. Once ``n`` vector steps are held, every new vector step emits the transitions
that start ``n - 1`` steps earlier, one per env, as ONE item with fields ``[num_envs, ...]``.
The last ``n - 1`` steps of a run are not emitted.

**Sequences** (``SequenceAdder``): ``length`` consecutive vector steps, as ONE item whose fields
are the ``Step`` fields stacked time-major, ``[length, num_envs, ...]``; a new item every
``period`` vector steps (``period < length``: consecutive items overlap). What a learner sees
at episode ends: sequences are *not* cut or padded at episode boundaries (the envs of a vector
env end their episodes at different times); each step carries its own ``terminated`` and
``truncated`` flags and its own ``next_observation`` (the final observation where the episode
ended, never the reset one). So a learner bootstraps from ``next_observation`` after a
truncation, does not bootstrap after a termination, and cuts its traces (GAE, V-trace) at
either; the step after an episode end is the first step of the next episode.

**Env sequences** (``EnvSequenceAdder``): the same ``length``-step windows every ``period``
vector steps, but written as ONE item per env (``[length, ...]`` per field), so that each env's
sequence has a priority of its own (R2D2's prioritized sequence replay). Sequences likewise
run across episode ends, with every step's flags.
"""

from __future__ import annotations

import collections
import functools
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import tree

from shoal.core.interfaces import Adder
from shoal.core.specs import ArraySpec, EnvironmentSpec, ObservationSpec
from shoal.core.types import Step
from shoal.replay.contract import ReplayClient


def _cast_observation(observation: Any, spec: ObservationSpec) -> Any:
    """An observation (an array, or a dict of arrays) with the dtypes of ``spec``."""
    if not isinstance(spec, ArraySpec) and isinstance(spec, Mapping):  # (a dict of them)
        return {key: np.asarray(observation[key], s.dtype) for key, s in spec.items()}
    return np.asarray(observation, spec.dtype)


def _cast_step(step: Step, spec: EnvironmentSpec) -> Step:
    """The step with the dtypes of the table signature (e.g. float64 observations -> float32)."""
    return Step(
        _cast_observation(step.observation, spec.observation),
        np.asarray(step.action, spec.action.dtype),
        np.asarray(step.reward, np.float32),
        np.asarray(step.terminated, bool),
        np.asarray(step.truncated, bool),
        _cast_observation(step.next_observation, spec.observation),
        dict(step.extras),
    )


class _WriterAdder(Adder):
    """Owns the replay writer (``client.writer``: the backend's ``ReplayWriter``) and its bounded, timed flushes.

    Each step goes to the writer as one flat list of columns (``tree.flatten``, the table
    signature's order), each item as the last ``length`` steps; ``_commit`` ends a vector step's
    writes (the native backend sends them in one call; Reverb streams them as they come).
    """

    def __init__(
        self, client: ReplayClient, table: str, num_keep_alive_refs: int, flush_timeout_s: float, priority: float = 1.0
    ) -> None:
        self._writer = client.writer(num_keep_alive_refs, flush_timeout_s)
        self._table = table
        self._priority = priority

    def _append(self, data: Any) -> None:
        """Appends one step (a structure of arrays) to the writer's columns."""
        self._writer.append(tree.flatten(data))

    def _create_item(self, length: int) -> None:
        """Inserts an item of the last ``length`` appended steps: one array per column for
        ``length == 1``, else the steps stacked (``[length, ...]``)."""
        self._writer.create_item(self._table, self._priority, length)

    def _commit(self) -> None:
        self._writer.commit()

    def flush(self, block_until_num_items: int = 0) -> None:
        """Waits until at most ``block_until_num_items`` written items are unconfirmed."""
        self._writer.flush(block_until_num_items)

    def send_pending(self) -> None:
        self._writer.send_pending()

    def close(self, timeout_s: float | None = None) -> bool:
        return self._writer.close(timeout_s)


def n_step_transition(steps: Sequence[Step], discount: float) -> dict[str, np.ndarray]:
    """The batched n-step transition starting at ``steps[0]`` (see the module docstring)."""
    first, last_step, n = steps[0], steps[-1], len(steps)
    powers = _powers(discount, n)
    terminated = np.array([step.terminated for step in steps])  # [n, num_envs]
    rewards = np.array([step.reward for step in steps], np.float64)
    ended = (terminated | np.array([step.truncated for step in steps]))[:-1]  # [n - 1, num_envs]
    next_obs = last_step.next_observation
    if not ended.any():  # no episode ends before the last step: every env's window is whole
        ret = powers[:n] @ rewards
        disc = powers[n] * (1.0 - last_step.terminated)
    else:
        alive = np.ones(terminated.shape, bool)  # alive[k]: no episode end before step k
        np.logical_not(np.logical_or.accumulate(ended, axis=0), out=alive[1:])
        last = alive.sum(axis=0) - 1  # the window's last step, m - 1, per env
        ret = powers[:n] @ (rewards * alive)
        envs = np.arange(last.size)
        disc = powers[last + 1] * (1.0 - terminated[last, envs])
        if isinstance(next_obs, np.ndarray):  # an episode ended inside the window: its final observation
            next_obs = np.array([step.next_observation for step in steps])[last, envs]
        else:
            next_obs = tree.map_structure(lambda *xs: np.array(xs)[last, envs], *[s.next_observation for s in steps])
    transition = {
        "observation": first.observation,
        "action": first.action,
        "reward": ret.astype(np.float32),
        "discount": disc.astype(np.float32),
        "next_observation": next_obs,
    }
    if first.extras:
        transition["extras"] = dict(first.extras)
    return transition


@functools.lru_cache(maxsize=16)
def _powers(discount: float, n: int) -> np.ndarray:
    """``discount ** k`` for ``k = 0 .. n``."""
    return discount ** np.arange(n + 1, dtype=np.float64)


class NStepTransitionAdder(_WriterAdder):
    """Writes batched n-step transitions to ``table`` (see the module docstring)."""

    def __init__(
        self,
        client: ReplayClient,
        table: str,
        spec: EnvironmentSpec,
        n_step: int,
        discount: float,
        priority: float = 1.0,
        max_in_flight_items: int = 8,
        flush_timeout_s: float = 120.0,
    ) -> None:
        if n_step < 1:
            raise ValueError(f"n_step must be >= 1, got {n_step}")
        super().__init__(client, table, 1, flush_timeout_s, priority)
        self._spec, self._discount = spec, discount
        self._max_in_flight = max_in_flight_items
        self._steps: collections.deque[Step] = collections.deque(maxlen=n_step)
        self._n_step = n_step
        self._items = 0
        self._flags: np.ndarray | None = None  # (rewards and episode ends of the steps held, as arrays)

    def add(self, step: Step) -> None:
        step = _cast_step(step, self._spec)
        self._steps.append(step)
        n = self._n_step
        if self._flags is None:  # [3, n, num_envs] rewards, terminated, ended, the last n steps'
            self._flags = np.zeros((3, n, np.shape(step.reward)[0]))
        flags = self._flags
        flags[:, :-1] = flags[:, 1:]  # (the window moves one step: one copy of a few hundred bytes)
        flags[0, -1], flags[1, -1] = step.reward, step.terminated
        np.logical_or(step.terminated, step.truncated, out=flags[2, -1])
        if len(self._steps) < n:
            return
        transition = _n_step_from_window(self._steps, flags, _powers(self._discount, n))
        self._writer.append_item(self._table, self._priority, tree.flatten(transition))
        self._items += 1
        if self._items % self._max_in_flight == 0:
            # Items stream to the server in the background; this only bounds how many are pending.
            self.flush(block_until_num_items=self._max_in_flight)


def _n_step_from_window(steps: Sequence[Step], flags: np.ndarray, powers: np.ndarray) -> dict:
    """``n_step_transition`` of the ``n`` steps held, from their rewards and episode ends kept as
    arrays (``flags``: ``[3, n, num_envs]`` rewards, terminated, terminated | truncated): the
    same numbers, with no array built from the steps unless an episode ends inside the window."""
    rewards, terminated, ended = flags
    first, last_step, n = steps[0], steps[-1], len(steps)
    next_obs = last_step.next_observation
    if not ended[:-1].any():  # no episode ends before the last step: every env's window is whole
        ret = powers[:n] @ rewards
        disc = powers[n] * (1.0 - terminated[-1])
    else:
        alive = np.ones(terminated.shape, bool)  # alive[k]: no episode end before step k
        np.logical_not(np.logical_or.accumulate(ended[:-1] > 0, axis=0), out=alive[1:])
        last = alive.sum(axis=0) - 1  # the window's last step, m - 1, per env
        ret = powers[:n] @ (rewards * alive)
        envs = np.arange(last.size)
        disc = powers[last + 1] * (1.0 - terminated[last, envs])
        if isinstance(next_obs, np.ndarray):  # an episode ended inside the window: its final observation
            next_obs = np.array([step.next_observation for step in steps])[last, envs]
        else:
            next_obs = tree.map_structure(lambda *xs: np.array(xs)[last, envs], *[s.next_observation for s in steps])
    transition = {
        "observation": first.observation,
        "action": first.action,
        "reward": ret.astype(np.float32),
        "discount": disc.astype(np.float32),
        "next_observation": next_obs,
    }
    if first.extras:
        transition["extras"] = dict(first.extras)
    return transition


class SequenceAdder(_WriterAdder):
    """Writes ``[length, num_envs, ...]`` sequences of vector steps every ``period`` steps.

    Each item is flushed (confirmed by the server) before ``add`` returns, so a learner in the
    same thread can sample it at once, and an actor feeding a full queue waits here.
    """

    def __init__(
        self,
        client: ReplayClient,
        table: str,
        spec: EnvironmentSpec,
        length: int,
        period: int | None = None,
        priority: float = 1.0,
        flush_timeout_s: float = 120.0,
    ) -> None:
        period = length if period is None else period
        if length < 1 or not 1 <= period <= length:
            raise ValueError(
                f"sequence length must be >= 1 and 1 <= period <= length, got length={length}, period={period}"
            )
        super().__init__(client, table, length, flush_timeout_s, priority)
        self._spec, self._length, self._period = spec, length, period
        self._steps = 0

    def add(self, step: Step) -> None:
        step = _cast_step(step, self._spec)
        fields: Mapping = step._asdict()
        if not step.extras:
            fields = {k: v for k, v in fields.items() if k != "extras"}
        self._append(fields)
        self._steps += 1
        if self._steps >= self._length and (self._steps - self._length) % self._period == 0:
            self._create_item(self._length)
            self.flush()  # (sends it: commit, then wait for it)


class EnvSequenceAdder(_WriterAdder):
    """Writes each env's last ``length`` steps as one item, every ``period`` vector steps (see the
    module docstring), at ``priority``; items stream to the server, at most
    ``max_in_flight_items`` unconfirmed.

    On a writer that shares steps between items (the native backend's), each env's step is
    written once and an item references its env's last ``length`` steps, so overlapping
    sequences (``period < length``) share them; on Reverb's, each env's window is written as
    one step of its own (Reverb's chunks hold consecutive steps: an item strided over a vector
    env's rows would span a chunk per step)."""

    def __init__(
        self,
        client: ReplayClient,
        table: str,
        spec: EnvironmentSpec,
        length: int,
        period: int,
        priority: float = 1.0,
        max_in_flight_items: int = 64,
        flush_timeout_s: float = 120.0,
    ) -> None:
        if length < 1 or not 1 <= period <= length:
            raise ValueError(
                f"sequence length must be >= 1 and 1 <= period <= length, got length={length}, period={period}"
            )
        writer = client.writer(1, flush_timeout_s)
        self._shares = writer.shares_steps
        if self._shares:  # (room for every env's steps of one window)
            writer.close()
            writer = client.writer(length * spec.num_envs, flush_timeout_s)
        self._writer, self._table, self._priority = writer, table, priority
        self._spec, self._period = spec, period
        self._max_in_flight = max(max_in_flight_items, spec.num_envs)
        self._steps: collections.deque = collections.deque(maxlen=length)  # fields, or each env's step refs
        self._length = length
        self._added = self._items = 0

    def add(self, step: Step) -> None:
        step = _cast_step(step, self._spec)
        fields = step._asdict()
        if not step.extras:
            del fields["extras"]
        if self._shares:  # (each env's row a step of its own, in one call: [num_envs, ...] per column)
            self._steps.append(self._writer.append_rows(tree.flatten(fields)))
        else:
            self._steps.append(fields)
        self._added += 1
        length = self._length
        if self._added < length or (self._added - length) % self._period:
            return
        if self._shares:  # (each env's steps of the window: a column of the [length, num_envs] indices)
            for env_steps in np.array(self._steps).T.tolist():
                self._writer.create_item(self._table, self._priority, env_steps)
            self._items += self._spec.num_envs
            self._commit()
            return
        # [length, num_envs, ...] -> one [length, ...] item per env
        window = tree.map_structure(lambda *xs: np.stack(xs), *self._steps)
        for env in range(self._spec.num_envs):
            self._append(tree.map_structure(lambda x, env=env: x[:, env], window))
            self._create_item(1)
            self._items += 1
            if self._items % self._max_in_flight == 0:
                self.flush(block_until_num_items=self._max_in_flight)
        self._commit()
