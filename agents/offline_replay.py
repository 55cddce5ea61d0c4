"""What offline agents (``bc``, ``cql``) share: replay that a dataset fills once and that the
learner then samples freely.

An offline agent has no actors: ``shoal train --dataset PATH`` writes the dataset's episodes
into replay through the agent's own adder (``shoal.launch.experiments.offline``), once, and the
learner samples from it with no replay ratio to keep (a ``RateLimit`` that only waits for the
first item: Reverb's ``MinSize(1)``). ``offline = True`` on the builder tells the runner so.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from shoal.replay.tables import RateLimit, TableSpec

# Samples never wait for inserts, and inserts never for samples: the table is filled before the
# learner starts. (``RateLimit(samples_per_insert, min_size_to_sample, min_diff, max_diff)``.)
FREE_SAMPLING = RateLimit(1.0, 1, -sys.float_info.max, sys.float_info.max)


def offline_tables(tables: Sequence[Any]) -> list[Any]:
    """``tables`` (``TableSpec``s) sampled freely once they hold an item (``FREE_SAMPLING``)."""
    out = []
    for table in tables:
        if not isinstance(table, TableSpec):
            raise TypeError(f"offline replay takes TableSpecs, got {type(table).__name__}")
        out.append(table.replace(rate_limit=FREE_SAMPLING))
    return out


__all__ = ["FREE_SAMPLING", "offline_tables"]
