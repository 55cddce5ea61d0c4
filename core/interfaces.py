"""The small interfaces every Shoal component is written against (after Acme's core)."""

from __future__ import annotations

import abc
from typing import Any, Iterator, Mapping

import numpy as np

from shoal.core.timing import Stopwatch
from shoal.core.types import Sample, Step


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


class Dataset(Iterator[Sample], abc.ABC):
    """Host batches from a replay table, one per learner update: what a learner consumes and
    what the runners pace it by.

    ``table`` is the table sampled, ``items_per_update`` the replay items one batch takes, and
    ``num_envs`` the envs axis every item has (transitions of one vector step, or env
    sequences of one chunk)."""

    table: str
    items_per_update: int
    num_envs: int

    @abc.abstractmethod
    def __next__(self) -> Sample:
        """The next batch; blocks until replay serves it (raises ``StopIteration`` once closed)."""

    @abc.abstractmethod
    def example(self) -> Sample:
        """A batch of zeros shaped like the real ones, sampling nothing (to compile with)."""

    def close(self) -> None:
        """Stops iterating and releases the connection to replay."""


class Learner(VariableSource, Saveable):
    """Consumes replay data and updates parameters.

    ``stopwatch`` (given to the learner when it is made) times its ``sample_wait`` and
    ``sgd_update``; ``version`` counts its updates (the version ``get_variables`` serves)."""

    stopwatch: Stopwatch

    @property
    @abc.abstractmethod
    def version(self) -> int:
        """Updates so far."""

    @abc.abstractmethod
    def step(self) -> Mapping[str, float]:
        """Runs one update (one or more SGD steps) on the next batch; returns its metrics."""

    @abc.abstractmethod
    def ready(self) -> bool:
        """True when ``step`` would find its next batch waiting (it would not block on data)."""

    def warm_up(self, example: Sample) -> None:
        """Compiles the update for batches like ``example`` (nothing is trained or counted), so
        that the first real update does not wait for the compiler."""

    def check_finite(self) -> None:
        """Raises ``FloatingPointError`` if the last update's loss or metrics were NaN or
        infinite (with what is known of the batch); nothing to check by default."""

    def close(self) -> None:
        """Stops background work (e.g. prefetching)."""


class Adder(abc.ABC):
    """Turns an actor's vector steps into replay items."""

    @abc.abstractmethod
    def add(self, step: Step) -> None:
        """Adds one vector step (every field has a leading ``[num_envs]`` dimension)."""

    def flush(self) -> None:
        """Blocks until everything written so far reached the replay service."""

    def close(self) -> None:
        """Flushes and releases the connection to replay."""


class Actor(abc.ABC):
    """Chooses actions for a batch of environments and feeds what it sees to an adder."""

    @abc.abstractmethod
    def select_action(self, observation: np.ndarray) -> tuple[np.ndarray, Mapping[str, np.ndarray]]:
        """Returns ``(actions, extras)`` for ``observation`` of shape ``[num_envs, ...]``."""

    @abc.abstractmethod
    def observe(self, step: Step) -> None:
        """Records one vector step (its ``extras`` are those ``select_action`` returned)."""

    @abc.abstractmethod
    def update(self, wait: bool = False) -> None:
        """Lets the actor refresh its parameters (``wait``: block for the newest ones)."""
