"""The four small interfaces every Shoal component is written against (after Acme's core)."""

from __future__ import annotations

import abc
from typing import Any, Mapping

import numpy as np


class VariableSource(abc.ABC):
    """Something that serves (versioned) parameters: a learner, or an RPC client to one."""

    @abc.abstractmethod
    def get_variables(self, known_version: int = -1) -> tuple[int, Any]:
        """Returns ``(version, params)``; ``params`` is ``None`` when ``version == known_version``.

        ``params`` is a pytree of host (numpy) arrays. Versions increase with every update, so a
        client that already holds ``known_version`` does not pay for an unchanged copy.
        """


class Saveable(abc.ABC):
    """An object whose full state can be saved and restored (learner, counter, ...)."""

    @abc.abstractmethod
    def save(self) -> Any:
        """Returns the state as a pytree of numpy arrays and Python scalars."""

    @abc.abstractmethod
    def restore(self, state: Any) -> None:
        """Restores what ``save`` returned."""


class Learner(VariableSource, Saveable):
    """Consumes replay data and updates parameters."""

    @abc.abstractmethod
    def step(self) -> Mapping[str, float]:
        """Runs one update (one or more SGD steps) and returns its metrics."""


class Adder(abc.ABC):
    """Turns an actor's batched environment steps into replay items.

    ``items_written`` counts the items created so far (runners pace learners by it).
    """

    items_written: int = 0

    @abc.abstractmethod
    def add(self, observation: np.ndarray, action: np.ndarray, reward: np.ndarray,
            terminated: np.ndarray, truncated: np.ndarray, next_observation: np.ndarray) -> None:
        """Adds one vector step: every argument has a leading ``[num_envs]`` dimension.

        ``next_observation`` is the observation that follows ``action`` (for an env whose
        episode just ended, its *final* observation, not the reset one).
        """

    def flush(self) -> None:
        """Blocks until everything written so far reached the replay service."""


class Actor(abc.ABC):
    """Chooses actions for a batch of environments and feeds what it sees to an adder."""

    @abc.abstractmethod
    def select_action(self, observation: np.ndarray) -> np.ndarray:
        """Returns one action per environment for ``observation`` of shape ``[num_envs, ...]``."""

    @abc.abstractmethod
    def observe(self, observation: np.ndarray, action: np.ndarray, reward: np.ndarray,
                terminated: np.ndarray, truncated: np.ndarray, next_observation: np.ndarray) -> None:
        """Records one vector step (see ``Adder.add`` for the arguments)."""

    @abc.abstractmethod
    def update(self, wait: bool = False) -> None:
        """Lets the actor refresh its parameters (``wait``: block for the newest ones)."""
