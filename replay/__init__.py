"""Replay: Reverb tables, adders, the sharded dataset iterator, and priority updates.

This is the only Shoal package that touches TensorFlow (pulled in by Reverb).
"""

import os

# Reverb and TF log every sampler connection at INFO level; keep the terminal readable.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from shoal.replay.adders import NStepTransitionAdder  # noqa: E402
from shoal.replay.dataset import Sample, ShardedPrefetchIterator, device_layout, put_sharded  # noqa: E402
from shoal.replay.priorities import update_item_priorities  # noqa: E402
from shoal.replay.server import ReplayServer, make_replay_client  # noqa: E402
from shoal.replay.tables import make_transition_table, rate_limited_sample_budget  # noqa: E402

__all__ = [
    "NStepTransitionAdder", "ReplayServer", "Sample", "ShardedPrefetchIterator", "device_layout", "put_sharded",
    "make_replay_client", "make_transition_table", "rate_limited_sample_budget",
    "update_item_priorities",
]
