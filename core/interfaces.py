"""The small interfaces every Shoal component is written against (after Acme's core).

Replay's contract (its server, client, writer, sampler, and the sampled items' type) is
``shoal.replay.contract``, beside the two backends that implement it: ``core`` imports no other
Shoal package, and adders, datasets, runners and launchers import the contract from there."""

from __future__ import annotations

import abc
from collections.abc import Iterator, Mapping
from typing import Any, Protocol, runtime_checkable

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


class IteratorDataset(Dataset):
    """A plain iterator of ``Sample``s as a ``Dataset`` (tests, benchmarks: no replay table;
    one item per update, one env). ``as_dataset`` makes one where a ``Dataset`` is wanted."""

    table = "(an iterator, no replay table)"
    items_per_update = 1
    num_envs = 1

    def __init__(self, iterator: Iterator[Sample]) -> None:
        self._iterator = iterator

    def __next__(self) -> Sample:
        return next(self._iterator)

    def example(self) -> Sample:
        raise NotImplementedError("a plain iterator has no example batch; warm up with a real one")


def as_dataset(source: Dataset | Iterator[Sample]) -> Dataset:
    """``source`` itself if it is a ``Dataset``, else an ``IteratorDataset`` around it."""
    return source if isinstance(source, Dataset) else IteratorDataset(iter(source))


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

    def flush(self) -> None:  # noqa: B027 -- an optional hook: nothing by default
        """Blocks until everything written so far reached the replay service."""

    def send_pending(self) -> None:  # noqa: B027 -- an optional hook: nothing by default
        """Sends, without waiting, what the adder holds back for a later call (a native writer
        gathers items behind the call in flight until the next step): an actor that stops
        stepping for a while (paced, or at its step budget) calls it, so that a learner waiting
        on those items is not left waiting for a step that does not come. Nothing by default."""

    def close(self, timeout_s: float | None = None) -> bool:
        """Flushes and releases the connection to replay. ``timeout_s`` (an actor that stops):
        wait at most this long for replay to take what is pending (a table's rate limiter holds
        inserts back while the learner lags); what it did not take is dropped (Reverb's server may
        still insert what it was sent before). Returns whether everything written went in."""
        return True


class Actor(abc.ABC):
    """Chooses actions for a batch of environments and feeds what it sees to an adder: what an
    ``EnvironmentLoop`` calls (a runner's actor is a ``TrainingActor``)."""

    @abc.abstractmethod
    def select_action(self, observation: np.ndarray) -> tuple[np.ndarray, Mapping[str, np.ndarray]]:
        """Returns ``(actions, extras)`` for ``observation`` of shape ``[num_envs, ...]``."""

    @abc.abstractmethod
    def observe(self, step: Step) -> None:
        """Records one vector step (its ``extras`` are those ``select_action`` returned)."""

    @abc.abstractmethod
    def update(self, wait: bool = False) -> None:
        """Lets the actor refresh its parameters (``wait``: block for the newest ones)."""

    def end_episodes(self, ended: np.ndarray) -> None:  # noqa: B027 -- an optional hook: nothing by default
        """Tells the actor which envs' episodes ended (``[num_envs]`` bool; their next
        observation starts a new one): a recurrent actor resets their state. ``observe`` calls
        it for a training actor; an evaluation loop calls it itself. Feed-forward: nothing."""


@runtime_checkable
class TrainingActor(Protocol):
    """The actor a runner trains with (``AgentBuilder.make_actor``): an ``Actor`` whose
    schedule position and RNG key a checkpoint saves (``save``, ``restore``) and which tells
    the learner version of the parameters it acts with (``params_version``: the staleness
    the actor nodes log and the evaluator reports). ``shoal.actors.BatchedActor`` is one."""

    def select_action(self, observation: np.ndarray) -> tuple[np.ndarray, Mapping[str, np.ndarray]]: ...

    def observe(self, step: Step) -> None: ...

    def update(self, wait: bool = False) -> None: ...

    def save(self) -> Any: ...

    def restore(self, state: Any) -> None: ...

    @property
    def params_version(self) -> int: ...
