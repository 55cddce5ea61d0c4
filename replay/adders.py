"""The n-step transition adder, batched over a vector of environments.

For a step ``t`` of one env, with ``m = min(n, steps until its episode ends, inclusive)``:

    reward   = sum_{k=0}^{m-1} gamma^k * r_{t+k}
    discount = gamma^m * (1 - terminated_{t+m-1})
    next_observation = o_{t+m}   (the *final* observation if the episode ended at t+m-1)

so a terminated episode does not bootstrap, and a truncated one (time limit) does, from its
final observation. The adder keeps the last ``n`` vector steps; once it has ``n`` of them, every
new vector step emits the transitions that start ``n - 1`` steps earlier, one per env, as ONE
Reverb item with fields shaped ``[num_envs, ...]``. A start whose episode ends inside the window
simply gets a shorter horizon, so episode ends need no special writes. The last ``n - 1`` steps
of a run are not emitted.
"""

from __future__ import annotations

import collections
from typing import NamedTuple

import numpy as np
import reverb

from shoal.core.interfaces import Adder


class _Step(NamedTuple):
    observation: np.ndarray
    action: np.ndarray
    reward: np.ndarray
    terminated: np.ndarray
    ended: np.ndarray  # terminated or truncated
    next_observation: np.ndarray


def n_step_transition(steps: "collections.abc.Sequence[_Step]", discount: float) -> dict[str, np.ndarray]:
    """The batched n-step transition starting at ``steps[0]`` (see the module docstring)."""
    first = steps[0]
    ret = np.zeros(first.reward.shape, np.float64)
    disc = np.ones(first.reward.shape, np.float64)
    next_obs = first.next_observation.copy()
    alive = np.ones(first.reward.shape, bool)  # no episode end seen before step k
    for k, step in enumerate(steps):
        ret += np.where(alive, discount ** k * step.reward, 0.0)
        next_obs[alive] = step.next_observation[alive]
        disc = np.where(alive, discount ** (k + 1) * (1.0 - step.terminated), disc)
        alive &= ~step.ended
    return {
        "observation": first.observation,
        "action": first.action,
        "reward": ret.astype(np.float32),
        "discount": disc.astype(np.float32),
        "next_observation": next_obs,
    }


class NStepTransitionAdder(Adder):
    """Writes batched n-step transitions to ``table`` through one ``TrajectoryWriter``."""

    def __init__(self, client: reverb.Client, table: str, n_step: int, discount: float,
                 observation_dtype: np.dtype = np.float32, action_dtype: np.dtype = np.int32,
                 priority: float = 1.0, max_in_flight_items: int = 8) -> None:
        if n_step < 1:
            raise ValueError(f"n_step must be >= 1, got {n_step}")
        self._writer = client.trajectory_writer(num_keep_alive_refs=1)
        self._table = table
        self._discount = discount
        self._obs_dtype = observation_dtype
        self._act_dtype = action_dtype
        self._priority = priority
        self._max_in_flight = max_in_flight_items
        self._steps: collections.deque[_Step] = collections.deque(maxlen=n_step)
        self.items_written = 0

    def add(self, observation, action, reward, terminated, truncated, next_observation) -> None:
        terminated = np.asarray(terminated, bool)
        self._steps.append(_Step(
            np.asarray(observation, self._obs_dtype), np.asarray(action, self._act_dtype),
            np.asarray(reward, np.float64), terminated, terminated | np.asarray(truncated, bool),
            np.asarray(next_observation, self._obs_dtype)))
        if len(self._steps) < self._steps.maxlen:
            return
        self._writer.append(n_step_transition(self._steps, self._discount))
        history = self._writer.history
        self._writer.create_item(self._table, self._priority,
                                 {name: history[name][-1] for name in history})
        self.items_written += 1
        if self.items_written % self._max_in_flight == 0:
            # Items stream to the server in the background; this only bounds how many are pending.
            self.flush(block_until_num_items=self._max_in_flight)

    def flush(self, block_until_num_items: int = 0, timeout_s: float = 120.0) -> None:
        """Waits until at most ``block_until_num_items`` written items are unconfirmed."""
        try:
            self._writer.flush(block_until_num_items, timeout_ms=int(timeout_s * 1000))
        except reverb.errors.DeadlineExceededError as e:
            raise TimeoutError(
                f"replay table '{self._table}' did not confirm pending items within {timeout_s}s "
                "(inserts block while the learner lags behind the rate limiter's ratio)") from e

    def close(self) -> None:
        self._writer.close()
