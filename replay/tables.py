"""Reverb tables, described without TensorFlow: transitions (or env sequences) under a replay
ratio, an on-policy queue, and a dropping FIFO.

A ``TableSpec`` is what ``ReverbServer`` builds a Reverb table from: its selectors, size, rate
limiter and signature, in plain Python (``reverb.Table`` would import TensorFlow to encode the
signature: 3.3 s of CPU in every replay process). ``ReverbServer`` also takes ``reverb.Table``s.

Sizes given to these factories count *transitions* (env steps) where they say so; a table
counts *items*, and an item holds one vector step (``num_envs`` transitions) or one chunk of
vector steps. The conversion is done here, once, for every agent.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from collections.abc import Sequence
from typing import Any

SELECTORS = ("uniform", "prioritized", "fifo", "lifo")


@dataclasses.dataclass(frozen=True)
class RateLimit:
    """Reverb's rate limiter: sampling waits until the table holds ``min_size_to_sample`` items,
    and every insert or sample keeps ``inserts * samples_per_insert - samples`` within
    ``[min_diff, max_diff]`` (an operation that would leave it waits)."""

    samples_per_insert: float
    min_size_to_sample: int
    min_diff: float
    max_diff: float

    @classmethod
    def sample_to_insert_ratio(
        cls, samples_per_insert: float, min_size_to_sample: int, error_buffer: float
    ) -> RateLimit:
        """Reverb's ``SampleToInsertRatio``: ``samples_per_insert`` samples per insert once
        ``min_size_to_sample`` items are in, give or take ``error_buffer`` (the range is centred on
        ``samples_per_insert * min_size_to_sample``, what the first items allow)."""
        if samples_per_insert <= 0:
            raise ValueError(f"samples_per_insert ({samples_per_insert}) must be > 0")
        if min_size_to_sample < 1:
            raise ValueError(f"min_size_to_sample ({min_size_to_sample}) must be a positive integer")
        if error_buffer < max(1.0, samples_per_insert):
            raise ValueError(
                f"error_buffer ({error_buffer}) must be >= max(1.0, samples_per_insert="
                f"{samples_per_insert}): a smaller one could block every sample or insert"
            )
        offset = samples_per_insert * min_size_to_sample
        return cls(samples_per_insert, min_size_to_sample, offset - error_buffer, offset + error_buffer)


@dataclasses.dataclass(frozen=True)
class TableSpec:
    """A Reverb table: ``sampler`` and ``remover`` name its item selectors (``SELECTORS``; a
    ``"prioritized"`` one samples ``P(i) ∝ priority_i ** priority_exponent``), an item is removed
    after ``max_times_sampled`` samples (0: never), and ``signature`` is a nest (dicts, tuples,
    lists) of ``shoal.core.specs.ArraySpec`` with the items' full shapes, or ``None``."""

    name: str
    sampler: str
    remover: str
    max_size: int
    rate_limit: RateLimit
    max_times_sampled: int = 0
    priority_exponent: float | None = None
    signature: Any = None

    def __post_init__(self) -> None:
        for role, selector in (("sampler", self.sampler), ("remover", self.remover)):
            if selector not in SELECTORS:
                raise ValueError(f"table {self.name!r}: {role} {selector!r} is not one of {', '.join(SELECTORS)}")
        if "prioritized" in (self.sampler, self.remover) and self.priority_exponent is None:
            raise ValueError(f"table {self.name!r}: a prioritized selector needs a priority_exponent")
        if self.max_size < 1:
            raise ValueError(f"table {self.name!r}: max_size ({self.max_size}) must be a positive integer")

    def replace(self, **changes: Any) -> TableSpec:
        return dataclasses.replace(self, **changes)


def transition_items_per_batch(batch_size: int, num_envs: int) -> int:
    """Items a batch of ``batch_size`` transitions is cut from (the last one may be partly used)."""
    return math.ceil(batch_size / num_envs)


def make_transition_table(
    name: str,
    signature: dict,
    *,
    num_envs: int,
    batch_size: int,
    sgd_steps_per_update: int,
    samples_per_insert: float,
    samples_per_insert_tolerance: float,
    min_replay_size: int,
    max_replay_size: int,
    priority_exponent: float | None = None,
) -> TableSpec:
    """A replay table of batched transitions (sizes and ratio in transitions).

    Sampling is uniform (``priority_exponent=None``), or prioritized with ``P(i) ∝ priority_i **
    priority_exponent``; the oldest item is removed first. A ``SampleToInsertRatio`` rate
    limiter keeps transitions trained on per transition inserted at ``samples_per_insert`` once
    ``min_replay_size`` transitions are in: the learner cannot run ahead of the actors, nor fall
    behind by more than ``samples_per_insert_tolerance * samples_per_insert * min_replay_size``
    samples (at least two updates' worth, so one update never blocks halfway).
    """
    items_per_batch = transition_items_per_batch(batch_size, num_envs)
    # An item is sampled whole even if the batch uses part of it: scale the ratio to items.
    item_ratio = samples_per_insert * items_per_batch * num_envs / batch_size
    min_items = max(1, math.ceil(min_replay_size / num_envs))
    one_update = items_per_batch * sgd_steps_per_update
    error_buffer = max(2 * one_update + 2 * item_ratio, samples_per_insert_tolerance * item_ratio * min_items)
    return TableSpec(
        name,
        sampler="uniform" if priority_exponent is None else "prioritized",
        remover="fifo",
        max_size=max(min_items, math.ceil(max_replay_size / num_envs)),
        rate_limit=RateLimit.sample_to_insert_ratio(item_ratio, min_items, error_buffer),
        priority_exponent=priority_exponent,
        signature=signature,
    )


def make_sequence_table(
    name: str,
    signature: dict,
    *,
    batch_size: int,
    samples_per_insert: float,
    samples_per_insert_tolerance: float,
    min_replay_size: int,
    max_replay_size: int,
    priority_exponent: float,
) -> TableSpec:
    """A prioritized replay table of env sequences (``EnvSequenceAdder``; sizes and ratio in
    sequences): ``P(i) ∝ priority_i ** priority_exponent``, the oldest removed first, and a
    ``SampleToInsertRatio`` rate limiter of ``samples_per_insert`` sequences sampled per
    sequence inserted once ``min_replay_size`` are in (the error buffer as
    ``make_transition_table``'s: at least two batches)."""
    error_buffer = max(
        2 * batch_size + 2 * samples_per_insert, samples_per_insert_tolerance * samples_per_insert * min_replay_size
    )
    return TableSpec(
        name,
        sampler="prioritized",
        remover="fifo",
        max_size=max(min_replay_size, max_replay_size),
        rate_limit=RateLimit.sample_to_insert_ratio(samples_per_insert, min_replay_size, error_buffer),
        priority_exponent=priority_exponent,
        signature=signature,
    )


def make_queue_table(name: str, signature: dict, capacity: int) -> TableSpec:
    """A FIFO queue (Reverb's ``Table.queue``): every item is sampled exactly once; inserts wait
    while it holds ``capacity`` items (actors wait for the learner: on-policy data, e.g. PPO)."""
    return TableSpec(
        name,
        sampler="fifo",
        remover="fifo",
        max_size=capacity,
        max_times_sampled=1,
        rate_limit=RateLimit(1.0, 1, 0.0, float(capacity)),
        signature=signature,
    )


def make_dropping_fifo_table(name: str, signature: dict, capacity: int) -> TableSpec:
    """A FIFO that never makes inserts wait: items are sampled oldest first, at most once
    (samples-per-insert <= 1), and when ``capacity`` unsampled items are waiting the oldest is
    dropped (actors never wait for the learner, e.g. IMPALA). Sampling waits for an item."""
    return TableSpec(
        name,
        sampler="fifo",
        remover="fifo",
        max_size=capacity,
        max_times_sampled=1,
        rate_limit=RateLimit(1.0, 1, 0.0, sys.float_info.max),
        signature=signature,
    )


def without_insert_blocking(tables: Sequence[Any]) -> list[Any]:
    """The same tables (``TableSpec``s or ``reverb.Table``s) with rate limiters that never block
    inserts (samples are still limited).

    For the single-process runner, which inserts and samples from one thread: an insert that
    waited for the learner would wait forever. (Acme's runner does the same.)
    """
    out = []
    for table in tables:
        if isinstance(table, TableSpec):
            out.append(table.replace(rate_limit=dataclasses.replace(table.rate_limit, max_diff=sys.float_info.max)))
            continue
        import reverb  # lazy: Reverb (TensorFlow), only for a reverb.Table

        info = table.info.rate_limiter_info
        out.append(
            table.replace(
                rate_limiter=reverb.rate_limiters.RateLimiter(
                    samples_per_insert=info.samples_per_insert,
                    min_size_to_sample=info.min_size_to_sample,
                    min_diff=info.min_diff,
                    max_diff=sys.float_info.max,
                )
            )
        )
    return out
