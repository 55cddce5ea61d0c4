"""Joining a Ray cluster, and checking what its machines share.

* ``connect(ray_address)`` joins a cluster (``auto``, ``HOST:PORT``) or, without one, starts a
  local Ray instance with this machine's CPUs; a cluster that refuses the driver (token
  authentication: ``RAY_AUTH_MODE=token`` and ``RAY_AUTH_TOKEN``) or cannot be reached is one
  ``ValueError`` naming what to set. ``started_local()``: whether this process started the
  local Ray it is connected to (its launcher shuts it down when its program ends).
* ``check_shared_directory(path)``: every alive machine of the cluster sees ``path`` as this
  process does (a run directory must be on shared storage), else a ``ValueError`` naming those
  that do not.
"""

from __future__ import annotations

import os
import secrets
import signal
import threading
import uuid
import warnings

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy


def _signal_handlers() -> dict:
    """This process's SIGTERM and SIGINT handlers (none from a thread other than the main one)."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}


_started_local = False  # (this process started the local Ray it is connected to)


def started_local() -> bool:
    """Whether this process started the local Ray instance it is connected to (``connect``
    without an address), so that it is this process's to shut down."""
    return _started_local and ray.is_initialized()


def connect(ray_address: str | None, namespace: str = "shoal") -> bool:
    """Joins the Ray cluster at ``ray_address`` (``None``: starts a local Ray instance with this
    machine's CPUs) unless this process already did; returns whether it started Ray here.
    Raises ``ValueError`` naming what to set when the cluster refuses or cannot be reached."""
    if ray.is_initialized():
        return False
    local = {} if ray_address else {"num_cpus": os.cpu_count(), "include_dashboard": False}
    if ray_address and not os.environ.get("RAY_AUTH_TOKEN"):
        # A cluster with token authentication refuses a driver without a token on every try:
        # give up after ~5 tries (1 s each) instead of Ray's 20 (one without answers at once).
        os.environ.setdefault("RAY_gcs_server_port_wait_time_s", "5")
    global _started_local
    handlers = _signal_handlers()
    try:
        with warnings.catch_warnings():  # Ray fork+execs its processes; JAX warns of any fork
            warnings.filterwarnings("ignore", message="os.fork", category=RuntimeWarning)
            ray.init(address=ray_address, namespace=f"{namespace}-{uuid.uuid4().hex[:8]}",
                     log_to_driver=True, logging_level="warning", **local)
    except Exception as e:  # noqa: BLE001 -- turned into one line
        raise ValueError(_connect_error(ray_address, e)) from None
    finally:
        for sig, handler in handlers.items():  # (ray.init installs its own: SIGTERM would exit at once)
            signal.signal(sig, handler)
    _started_local = not ray_address
    return True


def _connect_error(ray_address: str | None, e: Exception) -> str:
    where = f"the Ray cluster at {ray_address}" if ray_address else "a local Ray instance"
    text = (str(e).strip().splitlines() or [""])[0][:300]
    auth = "authentication" in f"{type(e).__name__} {e}".lower() or "token" in str(e).lower()
    if auth or (ray_address and not os.environ.get("RAY_AUTH_TOKEN")):
        return (f"{where} refused this driver ({type(e).__name__}: {text}); a cluster with token "
                "authentication needs RAY_AUTH_MODE=token and RAY_AUTH_TOKEN=<the cluster's token> in the "
                "driver's environment")
    return f"cannot connect to {where} ({type(e).__name__}: {text}); is it running, and is --ray-address right?"


def check_shared_directory(path: str, timeout_s: float = 60.0) -> None:
    """Raises ``ValueError`` unless every alive node of the Ray cluster sees the directory
    ``path`` (or its nearest existing parent) as this process does: a run directory must be on
    storage every host mounts. Writes one probe file there for the check and removes it."""
    base = os.path.abspath(path)
    while not os.path.isdir(base):
        base = os.path.dirname(base)
    nonce = secrets.token_hex(8)
    probe = os.path.join(base, f".shoal-storage-probe-{nonce}")
    try:
        with open(probe, "w") as f:
            f.write(nonce)
    except OSError as e:
        raise ValueError(f"cannot write to {base} (for --run-dir {path}): {e.strerror or e}") from None
    try:
        nodes = {n["NodeID"]: n.get("NodeManagerAddress", "?") for n in ray.nodes() if n.get("Alive")}
        refs = {node_id: _read_probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False))
                .remote(probe) for node_id in nodes}
        blind = []
        for node_id, ref in refs.items():
            try:
                seen = ray.get(ref, timeout=timeout_s)
            except Exception:  # noqa: BLE001 -- unreachable or too busy: it cannot vouch for it
                seen = None
            if seen != nonce:
                blind.append(nodes[node_id])
    finally:
        os.remove(probe)
    if blind:
        raise ValueError(f"--run-dir {path} is not on storage every host of the Ray cluster shares: "
                         f"{', '.join(sorted(blind))} do(es) not see {base} as this host does; under Ray the run "
                         "directory must be on a shared filesystem (e.g. NFS) mounted at the same path everywhere")


@ray.remote(num_cpus=0)
def _read_probe(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None
