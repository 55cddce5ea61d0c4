"""Replay items -> host batches (numpy). Device placement is the learner's job, not replay's.

Every batch is a ``Sample(data, keys)``: ``data`` a dict of numpy arrays whose *leading* axis is
the batch axis (the one a data-parallel learner splits across its devices), ``keys`` the replay
keys of the sampled items (for priority updates). One batch = one learner update:

* ``transition_batches``: ``[batch_size, num_steps, ...]`` transitions for ``num_steps``
  scanned SGD steps of ``batch_size`` each (column ``s`` is step ``s``'s batch), plus
  ``probability`` and ``table_size`` per transition; ``keys`` is ``[num_steps, items_per_batch]``.
  Items hold ``num_envs`` transitions: a batch is cut from ``ceil(batch_size / num_envs)`` items
  (the last may be partly used).
* ``sequence_batches``: ``[num_items * num_envs, length, ...]``, one row per env sequence
  (Reverb's time-major ``[length, num_envs]`` items are transposed); ``keys`` is ``[num_items]``.
* ``env_sequence_batches``: ``[batch_size, length, ...]``, one row per item (one env's
  sequence), plus its sampling ``probability`` ``[batch_size]``; ``keys`` is ``[batch_size]``.

Each function takes the replay client a builder is given (``shoal.replay.contract.ReplayClient``,
either backend; or a server's address). ``ReplayIterator`` gathers a batch's items from the
client's ``sampler`` (the backend's part: ``shoal.replay.native.sampler``,
``shoal.replay.reverb.sampler``), each ask waiting at most ``poll_s`` (so ``close()`` takes
effect within ``poll_s``), and lays them out; it never asks which backend it reads. The native
sampler asks its server for the items still missing, numpy from end to end, one call ahead over
RPC except from a queue. Reverb's opens Reverb's TensorFlow dataset at its first ask (so a process
imports TensorFlow only once it samples), with a rate limiter timeout of ``poll_s``: a stream that
waited that long ends by itself (a new one is opened, and items already served are kept for the
batch), and no sampler is left blocked in the table for a destructor to wait on.

A stream that ends at that timeout drops the items its worker had fetched ahead (measured: 4 of
1,000 items of a queue written at random intervals around the timeout were sampled and never
delivered). Uniform or prioritized replay samples again, but a queue's item exists once: a lost
rollout is lost data, and a one-process on-policy run would wait for it forever. So
``each_item_once`` iterators (``sequence_batches``: PPO's and IMPALA's queues) fetch one item at
a time on one worker, and nothing is fetched ahead to drop (0 of 3,000 lost in the same test).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import tree

from shoal.core.interfaces import Dataset
from shoal.core.types import Sample
from shoal.replay.backends import connect
from shoal.replay.contract import ReplayClient, SampledItems, SampleInfo
from shoal.replay.tables import transition_items_per_batch


class ReplayIterator(Dataset):
    """Samples ``items_per_update`` items of ``table`` per batch and lays them out with ``layout``
    (the ``Dataset`` a learner consumes). After ``close()``, ``next`` raises ``StopIteration``.
    ``each_item_once``: fetch nothing ahead (for a queue, whose items must not be lost: module
    docstring).

    ``server``: the replay client (``shoal.replay.contract.ReplayClient``, either backend), or a
    server's address (``shoal.replay.backends.connect``). Each ``next`` asks the client's sampler
    for the items still missing, ``poll_s`` at a time (``close()`` takes effect within ``poll_s``)."""

    def __init__(
        self,
        server: ReplayClient | str,
        table: str,
        items_per_update: int,
        num_envs: int,
        layout: Callable[[Any, SampleInfo], Any],
        timeout_s: float = 120.0,
        poll_s: float = 0.5,
        each_item_once: bool = False,
    ) -> None:
        self.table, self.items_per_update, self.num_envs = table, items_per_update, num_envs
        self._layout = layout
        client = connect(server) if isinstance(server, str) else server
        self._sampler = client.sampler(
            table, items_per_update, timeout_s=timeout_s, poll_s=poll_s, each_item_once=each_item_once
        )
        self._served: list[SampledItems] = []  # items served but not yet in a batch
        self._closed = False

    def __next__(self) -> Sample:
        have = sum(len(part.info.key) for part in self._served)
        while have < self.items_per_update:
            if self._closed:
                self._sampler.close()  # (the stream and what it holds: released here, by their user)
                raise StopIteration
            part = self._sampler.sample(self.items_per_update - have)
            if part is not None:
                self._served.append(part)
                have += len(part.info.key)
        data, info = _concatenate(self._served)
        n = self.items_per_update
        if have == n:  # (the usual case: one batch served whole, nothing to cut)
            self._served = []
            return self._layout(data, info)
        self._served = [SampledItems(*_slice(data, info, n, have))]
        return self._layout(*_slice(data, info, 0, n))

    def close(self) -> None:
        """Stops iterating (within ``poll_s``; the stream is released by the iterating thread)."""
        self._closed = True

    def example(self) -> Sample:
        """A batch of zeros shaped like the real ones (from the table's signature), sampling
        nothing (on Reverb it imports TensorFlow; an agent's ``example_batch`` gives the same without)."""
        data, info = self._sampler.example(self.items_per_update)
        return self._layout(data, info)


def _concatenate(parts: list) -> tuple[Any, Any]:
    if len(parts) == 1:
        return parts[0].data, parts[0].info
    join = lambda *xs: np.concatenate(xs)  # noqa: E731
    return (tree.map_structure(join, *[p.data for p in parts]), tree.map_structure(join, *[p.info for p in parts]))


def _slice(data: Any, info: Any, start: int, stop: int) -> tuple[Any, Any]:
    cut = lambda x: x[start:stop]  # noqa: E731
    return tree.map_structure(cut, data), tree.map_structure(cut, info)


def transition_batches(
    server: Any, table: str, *, num_envs: int, batch_size: int, num_steps: int = 1
) -> ReplayIterator:
    """Batches of ``[batch_size, num_steps, ...]`` transitions (see the module docstring)."""
    items_per_batch = transition_items_per_batch(batch_size, num_envs)

    def layout(data: Any, info: Any) -> Sample:
        def per_transition(x: np.ndarray) -> np.ndarray:
            # [steps * items, envs, ...] -> [steps, items * envs, ...] -> first batch_size -> [batch, steps, ...]
            x = x.reshape(num_steps, items_per_batch * num_envs, *x.shape[2:])[:, :batch_size]
            return np.swapaxes(x, 0, 1)

        fields = dict(data)
        for name in ("probability", "table_size"):
            fields[name] = np.repeat(getattr(info, name).astype(np.float32)[:, None], num_envs, axis=1)
        laid = {  # (a field that is an array directly: no tree walk, per batch)
            k: per_transition(v) if isinstance(v, np.ndarray) else tree.map_structure(per_transition, v)
            for k, v in fields.items()
        }
        return Sample(laid, info.key.reshape(num_steps, items_per_batch))

    return ReplayIterator(server, table, num_steps * items_per_batch, num_envs, layout)


def sequence_batches(server: Any, table: str, *, num_envs: int, num_items: int = 1) -> ReplayIterator:
    """Batches of ``[num_items * num_envs, length, ...]`` env sequences (see the module docstring),
    from a queue: each item is fetched once, none ahead (``each_item_once``)."""

    def layout(data: Any, info: Any) -> Sample:
        def per_sequence(x: np.ndarray) -> np.ndarray:
            # [items, length, envs, ...] -> [items, envs, length, ...] -> [items * envs, length, ...]
            x = np.swapaxes(x, 1, 2)
            return x.reshape(x.shape[0] * x.shape[1], *x.shape[2:])

        return Sample(tree.map_structure(per_sequence, data), info.key)

    return ReplayIterator(server, table, num_items, num_envs, layout, each_item_once=True)


def env_sequence_batches(server: Any, table: str, *, batch_size: int) -> ReplayIterator:
    """Batches of ``batch_size`` env sequences ``[batch_size, length, ...]`` and their sampling
    probabilities (see the module docstring), sampled by the table's selector."""

    def layout(data: Any, info: Any) -> Sample:
        return Sample({**data, "probability": info.probability.astype(np.float32)}, info.key)

    return ReplayIterator(server, table, batch_size, 1, layout)
