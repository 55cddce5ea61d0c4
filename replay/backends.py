"""The two replay backends and how a run picks one.

* ``"reverb"``: DeepMind's Reverb (``shoal.replay.reverb``): its C++ server, streamed
  writes, TensorFlow datasets. dm-reverb 0.14 is its last release: Python 3.11 only.
* ``"native"``: Shoal's own (``shoal.replay.native``): the same table semantics (one
  conformance suite holds both to them), any Python, no TensorFlow, seeded sampling, loopback
  RPC with a token in a distributed program.

A run names one (``--replay``, ``ExperimentConfig.replay``); ``None`` means the default:
Reverb where it is installed, native elsewhere. Resume keeps the run's.

Both implement ``shoal.replay.contract``; this module is the one place that names them
(``make_replay_server``, ``connect``): the rest of Shoal talks to replay through the contract.
"""

from __future__ import annotations

import importlib.util
import sys
from typing import Any, Sequence

from shoal.replay.contract import ReplayClient, ReplayServer
from shoal.replay.native.client import SCHEME, client_for
from shoal.replay.native.server import NativeReplayServer
from shoal.replay.reverb.client import ReverbClient
from shoal.replay.reverb.server import ReverbServer

BACKENDS = ("reverb", "native")


def reverb_installed() -> bool:
    """Whether ``import reverb`` would find dm-reverb (without importing it: TensorFlow)."""
    return importlib.util.find_spec("reverb") is not None


def default_backend() -> str:
    return "reverb" if reverb_installed() else "native"


def check_backend(name: str | None) -> str:
    """``name`` (or the default for ``None``) if this Python can run it; else a one-line
    ``ValueError`` saying why and what to do."""
    if name is None:
        return default_backend()
    if name not in BACKENDS:
        raise ValueError(f"replay backend {name!r} is not one of {', '.join(BACKENDS)}")
    if name == "reverb" and not reverb_installed():
        version = f"{sys.version_info.major}.{sys.version_info.minor}"
        raise ValueError(
            f"replay backend 'reverb' is not installed on this Python ({version}): dm-reverb 0.14, "
            "its last release, has wheels for Python 3.11 only; use --replay native (the default "
            "here), or a Python 3.11 venv with `pip install -e '.[dev]'`"
        )
    return name


def make_replay_server(
    tables: Sequence[Any],
    backend: str | None = None,
    *,
    port: int | None = None,
    checkpoint_dir: str | None = None,
    seed: int = 0,
    gated: bool = False,
) -> ReplayServer:
    """A replay server of ``tables`` on ``backend``, with its ``client``: Reverb's on ``port``
    (``None``: a free one), or a native server in this process (``gated``: it samples only
    what the runner grants, so a seeded run is reproducible; Reverb ignores it)."""
    backend = check_backend(backend)
    if backend == "native":
        return NativeReplayServer(tables, checkpoint_dir=checkpoint_dir, seed=seed, gated=gated)
    return ReverbServer(tables, port=port, checkpoint_dir=checkpoint_dir)


def connect(address: str) -> ReplayClient:
    """A client of the server at ``address``: a native server's in this process (its client's
    ``server_address``, ``native://...``), else Reverb's at ``host:port``."""
    if address.startswith(SCHEME):
        return client_for(address)
    check_backend("reverb")
    return ReverbClient(address)
