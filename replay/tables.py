"""Reverb tables: transitions (or env sequences) under a replay ratio, an on-policy queue, and a
dropping FIFO.

Sizes given to these factories count *transitions* (env steps) where they say so; a table
counts *items*, and an item holds one vector step (``num_envs`` transitions) or one chunk of
vector steps. The conversion is done here, once, for every agent.
"""

from __future__ import annotations

import math
import sys
from typing import Sequence

import reverb


def transition_items_per_batch(batch_size: int, num_envs: int) -> int:
    """Items a batch of ``batch_size`` transitions is cut from (the last one may be partly used)."""
    return math.ceil(batch_size / num_envs)


def make_transition_table(name: str, signature: dict, *, num_envs: int, batch_size: int,
                          sgd_steps_per_update: int, samples_per_insert: float,
                          samples_per_insert_tolerance: float, min_replay_size: int,
                          max_replay_size: int, priority_exponent: float | None = None) -> reverb.Table:
    """A replay table of batched transitions (sizes and ratio in transitions).

    Sampling is uniform (``priority_exponent=None``), or prioritized with ``P(i) ∝ priority_i **
    priority_exponent``; the
    oldest item is removed first. A ``SampleToInsertRatio`` rate limiter keeps transitions
    trained on per transition inserted at ``samples_per_insert`` once ``min_replay_size``
    transitions are in: the learner cannot run ahead of the actors, nor fall behind by more
    than ``samples_per_insert_tolerance * samples_per_insert * min_replay_size`` samples (at
    least two updates' worth, so one update never blocks halfway).
    """
    items_per_batch = transition_items_per_batch(batch_size, num_envs)
    # An item is sampled whole even if the batch uses part of it: scale the ratio to items.
    item_ratio = samples_per_insert * items_per_batch * num_envs / batch_size
    min_items = max(1, math.ceil(min_replay_size / num_envs))
    one_update = items_per_batch * sgd_steps_per_update
    error_buffer = max(2 * one_update + 2 * item_ratio,
                       samples_per_insert_tolerance * item_ratio * min_items)
    sampler = (reverb.selectors.Uniform() if priority_exponent is None
               else reverb.selectors.Prioritized(priority_exponent))
    return reverb.Table(
        name=name, sampler=sampler, remover=reverb.selectors.Fifo(),
        max_size=max(min_items, math.ceil(max_replay_size / num_envs)),
        rate_limiter=reverb.rate_limiters.SampleToInsertRatio(
            samples_per_insert=item_ratio, min_size_to_sample=min_items, error_buffer=error_buffer),
        signature=signature)


def make_sequence_table(name: str, signature: dict, *, batch_size: int, samples_per_insert: float,
                        samples_per_insert_tolerance: float, min_replay_size: int, max_replay_size: int,
                        priority_exponent: float) -> reverb.Table:
    """A prioritized replay table of env sequences (``EnvSequenceAdder``; sizes and ratio in
    sequences): ``P(i) ∝ priority_i ** priority_exponent``, the oldest removed first, and a
    ``SampleToInsertRatio`` rate limiter of ``samples_per_insert`` sequences sampled per
    sequence inserted once ``min_replay_size`` are in (the error buffer as
    ``make_transition_table``'s: at least two batches)."""
    error_buffer = max(2 * batch_size + 2 * samples_per_insert,
                       samples_per_insert_tolerance * samples_per_insert * min_replay_size)
    return reverb.Table(
        name=name, sampler=reverb.selectors.Prioritized(priority_exponent), remover=reverb.selectors.Fifo(),
        max_size=max(min_replay_size, max_replay_size),
        rate_limiter=reverb.rate_limiters.SampleToInsertRatio(
            samples_per_insert=samples_per_insert, min_size_to_sample=min_replay_size, error_buffer=error_buffer),
        signature=signature)


def make_queue_table(name: str, signature: dict, capacity: int) -> reverb.Table:
    """A FIFO queue: every item is sampled exactly once; inserts wait while it holds ``capacity``
    items (actors wait for the learner: on-policy data, e.g. PPO)."""
    return reverb.Table.queue(name, capacity, signature=signature)


def make_dropping_fifo_table(name: str, signature: dict, capacity: int) -> reverb.Table:
    """A FIFO that never makes inserts wait: items are sampled oldest first, at most once
    (samples-per-insert <= 1), and when ``capacity`` unsampled items are waiting the oldest is
    dropped (actors never wait for the learner, e.g. IMPALA). Sampling waits for an item."""
    return reverb.Table(
        name=name, sampler=reverb.selectors.Fifo(), remover=reverb.selectors.Fifo(),
        max_size=capacity, max_times_sampled=1,
        rate_limiter=reverb.rate_limiters.RateLimiter(
            samples_per_insert=1.0, min_size_to_sample=1, min_diff=0.0, max_diff=sys.float_info.max),
        signature=signature)


def without_insert_blocking(tables: Sequence[reverb.Table]) -> list[reverb.Table]:
    """The same tables with rate limiters that never block inserts (samples are still limited).

    For the single-process runner, which inserts and samples from one thread: an insert that
    waited for the learner would wait forever. (Acme's runner does the same.)
    """
    out = []
    for table in tables:
        info = table.info.rate_limiter_info
        out.append(table.replace(rate_limiter=reverb.rate_limiters.RateLimiter(
            samples_per_insert=info.samples_per_insert, min_size_to_sample=info.min_size_to_sample,
            min_diff=info.min_diff, max_diff=sys.float_info.max)))
    return out
