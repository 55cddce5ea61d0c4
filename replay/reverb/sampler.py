"""``ReverbSampler``: the Reverb backend's part of a ``ReplayIterator`` (a
``shoal.replay.contract.ReplaySampler``): a table's items through Reverb's TensorFlow dataset.

The dataset is opened at the first ``sample`` (so a process imports TensorFlow only once it
samples: a learner node serves its parameters, and a one-process run takes its first env steps,
before), with a rate limiter timeout of ``poll_s``: a stream that waited that long for an item
ends by itself (``sample`` returns ``None``, and the next call opens a new one), so the iterator's
``close()`` takes effect within ``poll_s`` and no sampler is left blocked in the table for a
destructor to wait on. ``each_item_once``: one item in flight on one worker (a stream that ends
at its timeout drops what a worker fetched ahead: see ``shoal.replay.dataset``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tree

from shoal.replay.contract import SampledItems, SampleInfo


def full_reverb() -> Any:
    """The ``reverb`` package, fully imported: it imports TensorFlow, so only what uses Reverb's own
    Python API (its dataset, a look at a table, checkpoints) pays for it."""
    import reverb  # lazy: Reverb's full import (TensorFlow)

    return reverb


class ReverbSampler:
    """Items of ``table`` on the Reverb server at ``address``, ``items_per_update`` at a time."""

    def __init__(
        self, address: str, table: str, items_per_update: int, timeout_s: float, poll_s: float, each_item_once: bool
    ) -> None:
        self._address, self._table, self._items = address, table, items_per_update
        self._timeout_s, self._poll_s = timeout_s, poll_s
        self._ahead = (
            dict(max_in_flight_samples_per_worker=1, num_workers_per_iterator=1)
            if each_item_once
            else dict(max_in_flight_samples_per_worker=2 * items_per_update)
        )
        self._dataset: Any = None  # (opened by the first sample(): TensorFlow is imported then, not before)
        self._source: Any = None  # (an iterator of the open stream)

    def sample(self, num_items: int) -> SampledItems | None:
        """A batch of up to ``items_per_update`` items (whatever ``num_items``: the iterator keeps
        the rest), or ``None`` if the stream waited ``poll_s`` for one (a new one opens next)."""
        if self._source is None:
            self._source = (self._dataset or self._open()).as_numpy_iterator()
        try:
            part = next(self._source)
        except StopIteration:  # the stream waited poll_s for an item: open a new one next time
            self._source = None
            return None
        info = part.info
        return SampledItems(
            part.data, SampleInfo(info.key, info.probability, info.table_size, info.priority, info.times_sampled)
        )

    def _open(self) -> Any:
        """Reverb's TensorFlow dataset of the table (the import of TensorFlow happens here)."""
        import tensorflow as tf  # lazy: only a process that samples on Reverb imports TensorFlow

        reverb = full_reverb()

        dataset = reverb.TrajectoryDataset.from_table_signature(
            self._address,
            self._table,
            **self._ahead,
            get_signature_timeout_secs=int(self._timeout_s),
            rate_limiter_timeout_ms=int(self._poll_s * 1000),
        ).batch(self._items, drop_remainder=False)
        # No tf.data autotuning: nothing here to tune, and its model thread sleeps for growing
        # periods that an iterator's destructor waits out (seconds, at an arbitrary later GC).
        options = tf.data.Options()
        options.autotune.enabled = False
        self._dataset = dataset.with_options(options)
        return self._dataset

    def example(self, num_items: int) -> SampledItems:
        """Zeros shaped as the table's items (its signature read from the server: this imports
        TensorFlow; an agent's ``example_batch`` gives the same without)."""
        signature = full_reverb().Client(self._address).server_info(timeout=int(self._timeout_s))[self._table].signature
        data = tree.map_structure(lambda spec: np.zeros((num_items, *spec.shape), spec.dtype.as_numpy_dtype), signature)
        return SampledItems(data, SampleInfo.zeros(num_items))

    def close(self) -> None:
        """Releases Reverb's stream and its threads (here, by their user)."""
        self._source = self._dataset = None
