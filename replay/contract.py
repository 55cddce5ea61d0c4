"""The replay contract: what adders, datasets, runners and launchers call on replay, whichever
backend serves it.

Two backends implement it, each in its own folder, neither importing the other:
``shoal.replay.reverb`` (DeepMind's Reverb) and ``shoal.replay.native`` (Shoal's own);
``shoal.replay.backends`` picks one for a run. Code outside those folders talks to replay only
through the types here (and makes a server or a client through ``shoal.replay.backends``):

* a ``ReplayServer`` serves tables in this process and holds a ``client`` of them; the
  one-process runner paces its learner through ``can_sample``, ``items_sampled`` and ``grant``;
* a ``ReplayClient`` (that client, or the one a replay node's handle becomes in another
  process) opens ``writer``s for the adders and ``sampler``s for the datasets, reads each
  table's ``TableInfo`` (``server_info``), updates priorities and writes checkpoints;
* a ``ReplayWriter`` turns steps into items (``append``, ``create_item``, ``commit``,
  ``flush``, ``close``; ``append_rows`` keeps a vector step's envs as steps and ``append_item``
  makes a one-step item, each in one call); ``shares_steps`` says whether an item may name
  any kept steps (the native writer) or only the last ones appended (Reverb's);
* a ``ReplaySampler`` hands ``shoal.replay.dataset.ReplayIterator`` the items it lays out into
  batches: ``SampledItems`` (the items' ``data``, leading axis the items, and their
  ``SampleInfo``).

Every member here is implemented by both backends: callers never ask an object what it is
(no ``hasattr``), and ``tests/test_replay_contract.py`` checks both against these protocols.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple, Protocol, runtime_checkable

import numpy as np


class SampleInfo(NamedTuple):
    """What replay says of each sampled item (one entry per item, as Reverb's ``SampleInfo``):
    its ``key`` (for priority updates), the ``probability`` it was sampled with, the table's size
    then, its ``priority`` and how many times it was sampled (this time included)."""

    key: np.ndarray
    probability: np.ndarray
    table_size: np.ndarray
    priority: np.ndarray
    times_sampled: np.ndarray

    @classmethod
    def zeros(cls, num_items: int) -> SampleInfo:
        """The info of ``num_items`` made-up items (an example batch's: nothing sampled)."""
        n = num_items
        return cls(np.zeros(n, np.uint64), np.ones(n), np.ones(n, np.int64), np.ones(n), np.ones(n, np.int32))


class SampledItems(NamedTuple):
    """Items a sampler served: ``data`` (the table signature's nest of numpy arrays, leading axis
    the items) and their ``info``."""

    data: Any
    info: SampleInfo


class RateLimiterInfo(Protocol):
    """A table's rate limiter, as Reverb's ``RateLimiterInfo`` names its fields."""

    @property
    def samples_per_insert(self) -> float: ...

    @property
    def min_diff(self) -> float: ...

    @property
    def max_diff(self) -> float: ...

    @property
    def min_size_to_sample(self) -> int: ...

    @property
    def insert_stats(self) -> Any:
        """``.completed``: the inserts so far."""

    @property
    def sample_stats(self) -> Any:
        """``.completed``: the samples so far."""


class TableInfo(Protocol):
    """One table's state (``ReplayClient.server_info``), with the fields of Reverb's
    ``TableInfo`` that Shoal reads."""

    @property
    def name(self) -> str: ...

    @property
    def current_size(self) -> int: ...

    @property
    def max_size(self) -> int: ...

    @property
    def rate_limiter_info(self) -> RateLimiterInfo: ...

    @property
    def signature(self) -> Any:
        """The table's signature: a nest of specs with ``shape`` and ``dtype``."""


class ReplayWriter(Protocol):
    """What adders write through (``ReplayClient.writer``). Not thread-safe: one per adder.

    Each step is one flat list of arrays, the table signature's order (``append``); an item is
    made of the last ``length`` steps, or (``shares_steps``) of any steps still kept, named by
    what ``append`` returned. ``commit`` ends a vector step's writes; ``flush`` waits for the
    server to confirm them, raising ``TimeoutError`` after ``timeout_s`` (a table's rate limiter
    holds inserts back while the learner lags, or a queue is full)."""

    timeout_s: float

    @property
    def shares_steps(self) -> bool:
        """Whether ``create_item`` takes a list of the step indices ``append`` returned (each step
        is sent once, however many items use it); else only a length (the last steps)."""

    def append(self, columns: list) -> Any:
        """Keeps one step; returns its index where ``shares_steps``."""

    def append_rows(self, columns: list, /) -> Any:
        """Keeps each row of ``columns`` (arrays whose leading axis is the steps: a vector step's
        envs) as one step, as ``append`` row by row; returns their indices where ``shares_steps``."""

    def create_item(self, table: str, priority: float, steps: Any, /) -> None:
        """An item of the last ``steps`` steps (an int), or of the steps listed (``shares_steps``)."""

    def append_item(self, table: str, priority: float, columns: list, /) -> None:
        """``append(columns)``, ``create_item(table, priority, 1)`` and ``commit()`` in one call:
        a whole vector step's one-step item (an n-step adder's). The step serves this item
        alone: no later item may name it."""

    def commit(self) -> None:
        """Ends a vector step's writes (a backend may send them now or gather them)."""

    def send_pending(self) -> None:
        """Sends, without waiting, what is held back for a later call (a writer that stops
        writing for a while calls it, so a learner is not left waiting)."""

    def flush(self, block_until_num_items: int = 0) -> None:
        """Waits until at most ``block_until_num_items`` written items are unconfirmed."""

    def close(self, timeout_s: float | None = None) -> bool:
        """Flushes (waiting at most ``timeout_s`` if given; what is not taken by then is
        dropped) and releases the writer. Returns whether every item went in."""


class ReplaySampler(Protocol):
    """One table's items for one ``ReplayIterator`` (``ReplayClient.sampler``): the backend's
    part of sampling, behind the iterator that lays items out into batches."""

    def sample(self, num_items: int) -> SampledItems | None:
        """Items of the table: at least one and usually ``num_items`` (a backend may serve more:
        the iterator keeps the rest for its next batch), or ``None`` if none came within the
        sampler's ``poll_s`` (the iterator then checks whether it was closed and asks again)."""

    def example(self, num_items: int) -> SampledItems:
        """``num_items`` items of zeros shaped as the table's (from its signature), sampling nothing."""

    def close(self) -> None:
        """Releases the stream (and whatever it holds on the server's side)."""


@runtime_checkable
class ReplayClient(Protocol):
    """A client of a replay server: the ``client`` of a ``ReplayServer``, or what a replay node's
    handle becomes in another process. ``server_address`` names the server (``native://...`` for
    the native backend, ``host:port`` for Reverb's)."""

    @property
    def backend(self) -> str:
        """``"reverb"`` or ``"native"``."""

    @property
    def server_address(self) -> str: ...

    def server_info(self, timeout: int | None = None) -> Mapping[str, TableInfo]:
        """Each table's ``TableInfo``, by name."""

    def writer(self, num_keep_alive_refs: int, timeout_s: float = 120.0) -> ReplayWriter:
        """A writer that keeps the last ``num_keep_alive_refs`` steps for its items."""

    def sampler(
        self, table: str, items_per_update: int, *, timeout_s: float, poll_s: float, each_item_once: bool
    ) -> ReplaySampler:
        """A sampler of ``table`` for an iterator taking ``items_per_update`` items a batch, each
        ask waiting at most ``poll_s``; ``each_item_once``: fetch nothing ahead (a queue's items
        must not be lost)."""

    def mutate_priorities(self, table: str, updates: Mapping[Any, float] | None = None, deletes: Any = None) -> None:
        """Sets the priorities of items by key (``updates``) and deletes items (``deletes``)."""

    def checkpoint(self) -> str:
        """Writes a checkpoint of every table; returns its path."""

    def sample(self, table: str, num_samples: int = 1) -> Iterator[Any]:
        """Items read one by one, each with ``info`` and ``data``, for a look at what a table
        holds (a learner samples through ``shoal.replay.dataset``)."""


@runtime_checkable
class ReplayServer(Protocol):
    """A replay server in this process: its tables, and a ``client`` of them.

    ``restored_from`` is the checkpoint it restored at start (``None``: none). ``can_sample``,
    ``items_sampled`` and ``grant`` are what the one-process runner paces its learner by;
    ``grant`` lets a gated server (a seeded one-process run) sample ``num_items`` more (a
    backend that samples freely does nothing)."""

    @property
    def backend(self) -> str:
        """``"reverb"`` or ``"native"``."""

    @property
    def address(self) -> str: ...

    @property
    def client(self) -> ReplayClient: ...

    @property
    def restored_from(self) -> str | None: ...

    def can_sample(self, table: str, num_items: int) -> bool:
        """Whether ``table``'s rate limiter would let ``num_items`` more items be sampled now."""

    def items_sampled(self, table: str) -> int:
        """How many items ``table`` served to samplers since this server started."""

    def grant(self, table: str, num_items: int, after_mutations: int = 0) -> None:
        """Lets a gated server sample ``num_items`` more items of ``table``."""

    def stop(self) -> None:
        """Stops serving (waking every call that waits on a table)."""


__all__ = [
    "RateLimiterInfo",
    "ReplayClient",
    "ReplaySampler",
    "ReplayServer",
    "ReplayWriter",
    "SampleInfo",
    "SampledItems",
    "TableInfo",
]
