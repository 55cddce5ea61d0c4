"""Replay: one contract (``shoal.replay.contract``), two backends that implement it
(``shoal.replay.reverb``, ``shoal.replay.native``), tables and signatures, adders, host batch
iterators, and priority updates (``shoal.replay.backends`` says how a run picks a backend).

This is the only Shoal package that touches TensorFlow (pulled in by Reverb), and only the
Reverb learner's dataset imports it: tables, the server and the writers' client load without it. Its
names load on first use, so that ``shoal.replay.layouts`` (the shapes of the batches a dataset
yields, in numpy) imports where Reverb is not installed.
"""

import importlib
import os
from typing import Any

# Reverb and TF log every sampler connection at INFO level; keep the terminal readable.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

_NAMES = {
    "shoal.replay.adders": ("EnvSequenceAdder", "NStepTransitionAdder", "SequenceAdder"),
    "shoal.replay.dataset": ("ReplayIterator", "env_sequence_batches", "sequence_batches", "transition_batches"),
    "shoal.replay.layouts": ("env_sequence_example", "sequence_example", "transition_example"),
    "shoal.replay.priorities": ("item_priorities", "update_item_priorities"),
    "shoal.replay.contract": (
        "ReplayClient",
        "ReplaySampler",
        "ReplayWriter",
        "SampleInfo",
        "SampledItems",
        "TableInfo",
    ),
    "shoal.replay.reverb": ("ReverbClient", "ReverbServer", "make_replay_client"),
    "shoal.replay.backends": (
        "BACKENDS",
        "check_backend",
        "connect",
        "default_backend",
        "make_replay_server",
        "reverb_installed",
    ),
    "shoal.replay.native": ("NativeReplayClient", "NativeReplayServer"),
    "shoal.replay.signatures": (
        "env_sequence_signature",
        "sequence_signature",
        "step_signature",
        "transition_signature",
    ),
    "shoal.replay.tables": (
        "RateLimit",
        "TableSpec",
        "make_dropping_fifo_table",
        "make_queue_table",
        "make_sequence_table",
        "make_transition_table",
        "transition_items_per_batch",
        "without_insert_blocking",
    ),
    "shoal.core.types": ("Sample",),
}
_MODULE = {name: module for module, names in _NAMES.items() for name in names}


def __getattr__(name: str) -> Any:
    if name in _MODULE:
        return getattr(importlib.import_module(_MODULE[name]), name)
    raise AttributeError(f"module 'shoal.replay' has no attribute {name!r}")


__all__ = sorted(_MODULE)
