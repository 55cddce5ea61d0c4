"""``NativeSampler``: the native backend's part of a ``ReplayIterator`` (a
``shoal.replay.contract.ReplaySampler``).

Each ``sample`` asks the server for the items still missing, waiting at most ``poll_s``, and the
server returns what it could take (none is lost: numpy from end to end, no TensorFlow). Over RPC
(a distributed run) the next batch's items are asked for as soon as the last batch's came (one
call ahead, as Reverb's dataset keeps samples in flight), except from a queue
(``each_item_once``), whose items are fetched only when needed; and a batch's columns come
through shared memory when the server is on this host and they are large enough to gain.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tree

from shoal.core.shared_memory import ALIGN, Segment
from shoal.replay.contract import SampledItems, SampleInfo
from shoal.replay.native.writer import SHARED_MIN_BYTES


class NativeSampler:
    """Items of ``table`` from ``client`` (a ``NativeReplayClient``), ``items_per_update`` a batch."""

    def __init__(self, client: Any, table: str, items_per_update: int, poll_s: float, each_item_once: bool) -> None:
        self._client, self._table, self._items, self._poll_s = client, table, items_per_update, poll_s
        self._signature: Any = None  # (the table's, read at the first sample)
        # (in one process sampling is a direct call: nothing to overlap)
        self._prefetch = not client.in_process and not each_item_once
        self._next_part: Any = None  # (a call under way: the next batch's items)
        self._segment: Segment | bool | None = None  # (shared memory with a server on this host, or False: none)

    def sample(self, num_items: int) -> SampledItems | None:
        if self._next_part is not None:  # (asked for while the last batch was laid out and used)
            served, self._next_part = self._next_part(), None
        else:
            served = self._client.sample_batch(self._table, num_items, self._poll_s, self._segment or None)
        if served is not None and self._segment is None:
            self._segment = self._shared_segment(served["columns"], len(served["key"]))
        if self._prefetch:
            self._next_part = self._client.sample_batch_later(
                self._table, self._items, self._poll_s, self._segment or None
            )
        if served is None:
            return None
        if self._signature is None:
            self._signature = self._client.signature(self._table)
        info = SampleInfo(
            served["key"], served["probability"], served["table_size"], served["priority"], served["times_sampled"]
        )
        return SampledItems(tree.unflatten_as(self._signature, list(served["columns"])), info)

    def _shared_segment(self, columns: list, num_items: int) -> Segment | bool:
        """(Over RPC, the server on this host) a shared-memory segment for a batch's columns
        (``shoal.core.shared_memory``), if they are large enough to gain from one; else ``False``
        (asked once)."""
        if not self._client.shared_memory:
            return False
        per_batch = [c.nbytes // num_items * self._items for c in columns]
        size = sum(-(-n // ALIGN) * ALIGN for n in per_batch)
        return (self._client.shared_segment(size) or False) if size >= SHARED_MIN_BYTES else False

    def example(self, num_items: int) -> SampledItems:
        signature = self._client.signature(self._table)
        data = tree.map_structure(lambda spec: np.zeros((num_items, *spec.shape), spec.dtype), signature)
        return SampledItems(data, SampleInfo.zeros(num_items))

    def close(self) -> None:
        """Lets the server unmap this sampler's segment, if any."""
        if self._segment:
            segment, self._segment = self._segment, False
            self._client.release_segment(segment)
