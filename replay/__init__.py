"""Replay: Reverb tables and signatures, adders, host batch iterators, and priority updates.

This is the only Shoal package that touches TensorFlow (pulled in by Reverb).
"""

import os

# Reverb and TF log every sampler connection at INFO level; keep the terminal readable.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from shoal.replay.adders import NStepTransitionAdder, SequenceAdder  # noqa: E402
from shoal.replay.dataset import ReplayIterator, Sample, sequence_batches, transition_batches  # noqa: E402
from shoal.replay.priorities import item_priorities, update_item_priorities  # noqa: E402
from shoal.replay.server import ReplayServer, make_replay_client  # noqa: E402
from shoal.replay.signatures import sequence_signature, step_signature, transition_signature  # noqa: E402
from shoal.replay.tables import (make_dropping_fifo_table, make_queue_table,  # noqa: E402
                                 make_transition_table, transition_items_per_batch,
                                 without_insert_blocking)

__all__ = [
    "NStepTransitionAdder", "ReplayIterator", "ReplayServer", "Sample", "SequenceAdder",
    "item_priorities", "make_dropping_fifo_table", "make_queue_table", "make_replay_client",
    "make_transition_table", "sequence_batches", "sequence_signature", "step_signature",
    "transition_batches", "transition_items_per_batch", "transition_signature",
    "update_item_priorities", "without_insert_blocking",
]
