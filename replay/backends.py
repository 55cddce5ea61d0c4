"""The two replay backends and how a run picks one.

* ``"reverb"``: DeepMind's Reverb (``shoal.replay.reverb``): its C++ server, streamed
  writes, TensorFlow datasets. dm-reverb 0.14 is its last release: Python 3.11 only.
* ``"native"``: Shoal's own (``shoal.replay.native``): the same table semantics (one
  conformance suite holds both to them), any Python, no TensorFlow, seeded sampling, loopback
  RPC with a token in a distributed program.

A run names one (``--replay``, ``ExperimentConfig.replay``); ``None`` means the default:
Reverb where it is installed, native elsewhere. Resume keeps the run's.

Both implement ``shoal.replay.contract``; this module is the one place that names them
(``make_replay_server``, ``connect``, ``remote_client``, ``check_checkpoint_files``): the rest of Shoal talks to replay
through the contract. A replay node hosts a server in its own process: Reverb's listens on its
port itself, a native one is served by Shoal's RPC layer (``NATIVE_SERVICE_METHODS``, exactly).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from shoal.replay.contract import ReplayClient, ReplayServer
from shoal.replay.native.checkpoint_files import FILES as NATIVE_CHECKPOINT_FILES
from shoal.replay.native.checkpoint_files import check_checkpoint as check_native_checkpoint
from shoal.replay.native.client import SCHEME, NativeReplayClient, client_for
from shoal.replay.native.server import SERVICE_METHODS as NATIVE_SERVICE_METHODS
from shoal.replay.native.server import NativeReplayServer
from shoal.replay.reverb.client import ReverbClient
from shoal.replay.reverb.server import ReverbServer

BACKENDS = ("reverb", "native")
__all__ = [
    "BACKENDS",
    "NATIVE_SERVICE_METHODS",
    "check_backend",
    "check_checkpoint_files",
    "connect",
    "default_backend",
    "make_replay_server",
    "remote_client",
    "reverb_installed",
]


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


def remote_client(
    backend: str, address: str, rpc: Callable[[], Any] | None = None, shared_memory: bool = False
) -> ReplayClient:
    """A client of the ``backend`` server another process serves at ``address`` (a replay
    node's): Reverb's own, or a native one's through ``rpc()`` (an RPC client of the node's
    server, made by the caller: replay imports no launcher), with bulk arrays through shared
    memory when ``shared_memory`` and the server is on this host."""
    if check_backend(backend) == "native":
        if rpc is None:
            raise ValueError(f"a native replay client of {address} needs an RPC client of its server (rpc=...)")
        return NativeReplayClient(rpc(), address, shared_memory=shared_memory)
    return ReverbClient(address)


def check_checkpoint_files(path: str) -> None:
    """Raises ``ValueError`` (one line naming the file) if the replay checkpoint at ``path`` is a
    native one (its files there) that cannot be read back (``shoal.replay.native.checkpoint_files``:
    only its arrays' headers are read). Reverb reads its own at start."""
    if any(os.path.lexists(os.path.join(path, name)) for name in NATIVE_CHECKPOINT_FILES[:2]):
        check_native_checkpoint(path)
