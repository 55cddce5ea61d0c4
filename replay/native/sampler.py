"""``NativeSampler``: the native backend's part of a ``ReplayIterator`` (a
``shoal.replay.contract.ReplaySampler``).

Each ``sample`` asks the server for the items still missing, waiting at most ``poll_s``, and the
server returns what it could take (none is lost: numpy from end to end, no TensorFlow). Over RPC
(a distributed run) the next batch's items are asked for as soon as the last batch's came (one
call ahead, as Reverb's dataset keeps samples in flight), except from a queue
(``each_item_once``), whose items are fetched only when needed; and a batch's columns come
through shared memory when the server is on this host and they are large enough to gain.

Over RPC each call asks for up to ``BATCHES_PER_CALL`` batches, waiting for the first one only
(``min_items``: the server adds what its rate limiter lets through at once, never waits for
it), and this sampler hands them out one batch at a time: a call's fixed cost (~0.4 ms of gRPC
on this CPU) is paid once per four batches where the limiter allows, and a rate-limited learner
gets each batch as soon as it would have. Batches larger than ``CALL_MAX_BYTES / 4`` come fewer a
call (one from ``CALL_MAX_BYTES`` on: an Atari R2D2 batch of ~200 MiB alone), counted from the
first batch's size. Items drawn ahead are drawn on the priorities of the moment (as Reverb's
samples in flight are), and from a table with ``max_times_sampled`` they count as sampled when
drawn (a sampler closed with batches ahead leaves them unused, as it did its one call ahead); a
run in one process draws each batch when asked.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tree

from shoal.core.shared_memory import ALIGN, Segment
from shoal.replay.contract import SampledItems, SampleInfo
from shoal.replay.native.writer import RPC_MAX_BYTES, SHARED_MIN_BYTES

BATCHES_PER_CALL = 4  # over RPC: batches one sample call may bring (the first waited for, the rest as ready) ...
CALL_MAX_BYTES = RPC_MAX_BYTES  # ... as long as they hold at most this many bytes (large batches: one a call)


class NativeSampler:
    """Items of ``table`` from ``client`` (a ``NativeReplayClient``), ``items_per_update`` a batch."""

    def __init__(self, client: Any, table: str, items_per_update: int, poll_s: float, each_item_once: bool) -> None:
        self._client, self._table, self._items, self._poll_s = client, table, items_per_update, poll_s
        self._signature: Any = None  # (the table's, read at the first sample)
        # (in one process sampling is a direct call: nothing to overlap)
        self._prefetch = not client.in_process and not each_item_once
        self._next_part: Any = None  # (a call under way: the next batch's items)
        self._segment: Segment | bool | None = None  # (shared memory with a server on this host, or False: none)
        self._per_call = BATCHES_PER_CALL if self._prefetch else 1
        self._ahead: dict[str, Any] | None = None  # (items a call brought beyond the batch asked for)

    def sample(self, num_items: int) -> SampledItems | None:
        if self._ahead is not None:  # (drawn by an earlier call: no call now)
            served = self._take_ahead(num_items)
        elif self._next_part is not None:  # (asked for while the last batch was laid out and used)
            served, self._next_part = self._next_part(), None
        else:
            served = self._client.sample_batch(self._table, num_items, self._poll_s, self._segment or None)
        if served is not None and self._segment is None:  # (the first batch: its size sets the call's)
            per_item = sum(c.nbytes for c in served["columns"]) / max(len(served["key"]), 1)
            self._per_call = max(1, min(self._per_call, int(CALL_MAX_BYTES // max(per_item * self._items, 1))))
            self._segment = self._shared_segment(served["columns"], len(served["key"]))
        if served is not None and len(served["key"]) > num_items:  # (several batches came: keep the rest)
            self._ahead = served
            served = self._take_ahead(num_items)
        if self._prefetch and self._ahead is None and self._next_part is None:
            self._next_part = self._client.sample_batch_later(
                self._table, self._items * self._per_call, self._poll_s, self._segment or None, min_items=self._items
            )
        if served is None:
            return None
        if self._signature is None:
            self._signature = self._client.signature(self._table)
        info = SampleInfo(
            served["key"], served["probability"], served["table_size"], served["priority"], served["times_sampled"]
        )
        return SampledItems(tree.unflatten_as(self._signature, list(served["columns"])), info)

    def _take_ahead(self, num_items: int) -> dict[str, Any]:
        """The first ``num_items`` of the items drawn ahead (all of them if fewer), the rest kept."""
        ahead = self._ahead
        assert ahead is not None
        count = len(ahead["key"])
        if count <= num_items:
            self._ahead = None
            return ahead
        head = {k: v[:num_items] for k, v in ahead.items() if k not in ("columns", "places")}
        rest = {k: v[num_items:] for k, v in ahead.items() if k not in ("columns", "places")}
        head["columns"] = [c[:num_items] for c in ahead["columns"]]
        rest["columns"] = [c[num_items:] for c in ahead["columns"]]
        self._ahead = rest
        return head

    def _shared_segment(self, columns: list, num_items: int) -> Segment | bool:
        """(Over RPC, the server on this host) a shared-memory segment for a batch's columns
        (``shoal.core.shared_memory``), if they are large enough to gain from one; else ``False``
        (asked once)."""
        if not self._client.shared_memory:
            return False
        per_batch = [c.nbytes // num_items * self._items * self._per_call for c in columns]
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
