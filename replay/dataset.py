"""Replay items -> host batches (numpy). Device placement is the learner's job, not replay's.

Every batch is a ``Sample(data, keys)``: ``data`` a dict of numpy arrays whose *leading* axis is
the batch axis (the one a data-parallel learner splits across its devices), ``keys`` the Reverb
keys of the sampled items (for priority updates). One batch = one learner update:

* ``transition_batches``: ``[batch_size, num_steps, ...]`` transitions for ``num_steps``
  scanned SGD steps of ``batch_size`` each (column ``s`` is step ``s``'s batch), plus
  ``probability`` and ``table_size`` per transition; ``keys`` is ``[num_steps, items_per_batch]``.
  Items hold ``num_envs`` transitions: a batch is cut from ``ceil(batch_size / num_envs)`` items
  (the last may be partly used).
* ``sequence_batches``: ``[num_items * num_envs, length, ...]``, one row per env sequence
  (Reverb's time-major ``[length, num_envs]`` items are transposed); ``keys`` is ``[num_items]``.

Iteration blocks until Reverb serves the items (the rate limiter decides when); the learner
reads it from a background thread (``shoal.learners``).
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import numpy as np
import reverb
import tree

from shoal.replay.tables import transition_items_per_batch


class Sample(NamedTuple):
    data: dict[str, Any]
    keys: np.ndarray


class ReplayIterator:
    """Samples ``items_per_update`` items of ``table`` per batch and lays them out with ``layout``.

    ``num_envs`` is the envs axis every Shoal item has (transitions of one vector step, or env
    sequences of one chunk)."""

    def __init__(self, server_address: str, table: str, items_per_update: int, num_envs: int,
                 layout: Callable[[Any, Any], Sample], timeout_s: float = 120.0) -> None:
        self.table, self.items_per_update, self.num_envs = table, items_per_update, num_envs
        self._layout = layout
        dataset = reverb.TrajectoryDataset.from_table_signature(
            server_address, table, max_in_flight_samples_per_worker=2 * items_per_update,
            get_signature_timeout_secs=int(timeout_s))
        self._source = dataset.batch(items_per_update, drop_remainder=True).as_numpy_iterator()

    def __iter__(self) -> "ReplayIterator":
        return self

    def __next__(self) -> Sample:
        sample = next(self._source)
        return self._layout(sample.data, sample.info)


def transition_batches(server_address: str, table: str, *, num_envs: int, batch_size: int,
                       num_steps: int = 1) -> ReplayIterator:
    """Batches of ``[batch_size, num_steps, ...]`` transitions (see the module docstring)."""
    items_per_batch = transition_items_per_batch(batch_size, num_envs)

    def layout(data, info) -> Sample:
        def per_transition(x: np.ndarray) -> np.ndarray:
            # [steps * items, envs, ...] -> [steps, items * envs, ...] -> first batch_size -> [batch, steps, ...]
            x = x.reshape(num_steps, items_per_batch * num_envs, *x.shape[2:])[:, :batch_size]
            return np.swapaxes(x, 0, 1)

        fields = dict(data)
        for name in ("probability", "table_size"):
            fields[name] = np.repeat(getattr(info, name).astype(np.float32)[:, None], num_envs, axis=1)
        return Sample(tree.map_structure(per_transition, fields),
                      info.key.reshape(num_steps, items_per_batch))

    return ReplayIterator(server_address, table, num_steps * items_per_batch, num_envs, layout)


def sequence_batches(server_address: str, table: str, *, num_envs: int, num_items: int = 1) -> ReplayIterator:
    """Batches of ``[num_items * num_envs, length, ...]`` env sequences (see the module docstring)."""

    def layout(data, info) -> Sample:
        def per_sequence(x: np.ndarray) -> np.ndarray:
            # [items, length, envs, ...] -> [items, envs, length, ...] -> [items * envs, length, ...]
            x = np.swapaxes(x, 1, 2)
            return x.reshape(x.shape[0] * x.shape[1], *x.shape[2:])

        return Sample(tree.map_structure(per_sequence, data), info.key)

    return ReplayIterator(server_address, table, num_items, num_envs, layout)
