"""Shoal's own replay backend: Reverb's table semantics as Shoal uses them, in plain Python and
numpy (no TensorFlow), seeded. ``NativeReplayServer`` (tables, step store, checkpoints),
``NativeReplayClient`` and ``NativeWriter`` (direct calls in one process, Shoal's RPC layer
between processes); see each module's docstring."""

from shoal.replay.native.client import NativeReplayClient, NativeWriter, ReplayServerGone
from shoal.replay.native.server import SERVICE_METHODS, NativeReplayServer, ReplayClosed

__all__ = [
    "NativeReplayClient",
    "NativeReplayServer",
    "NativeWriter",
    "ReplayClosed",
    "ReplayServerGone",
    "SERVICE_METHODS",
]
