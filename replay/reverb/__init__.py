"""The Reverb backend (DeepMind's Reverb: its C++ server, streamed writes, TensorFlow datasets;
dm-reverb 0.14, its last release, has wheels for Python 3.11 only): ``ReverbServer``,
``ReverbClient``, ``ReverbWriter`` and ``ReverbSampler``, which implement
``shoal.replay.contract``. Nothing here imports the native backend, nor TensorFlow at import:
see each module's docstring."""

from shoal.replay.reverb.client import ReverbClient, ReverbWriter, make_replay_client
from shoal.replay.reverb.sampler import ReverbSampler
from shoal.replay.reverb.server import ReverbServer

__all__ = ["ReverbClient", "ReverbSampler", "ReverbServer", "ReverbWriter", "make_replay_client"]
