"""Joining a Ray cluster, and checking what its machines share.

* ``connect(ray_address)`` joins a cluster (``auto``, ``HOST:PORT``) or, without one, starts a
  local Ray instance with this machine's CPUs; a cluster that refuses the driver (token
  authentication: ``RAY_AUTH_MODE=token`` and ``RAY_AUTH_TOKEN``) or cannot be reached is one
  ``ValueError`` naming what to set. ``started_local()``: whether this process started the
  local Ray it is connected to; ``shutdown_local()`` shuts it down, and kills what of it is still
  there ``RAY_EXIT_GRACE_S`` later (Ray's dashboard and runtime-env agents and idle workers
  outlived a run by 60-90 s, with parent 1).
* A local Ray is also taken down when this process dies without a word (SIGKILL): a *reaper*, a
  ``sh`` of its own session started beside it, holds a pipe only this process writes, on which
  it is sent the pids of Ray's processes; when the pipe closes without ``done`` (this process
  is gone) it kills those that are still Ray's. (Ray's GCS and raylet end with their driver;
  its agents waited ~60 s on the dead GCS first.)
* ``check_shared_directory(path)``: every alive machine of the cluster sees ``path`` as this
  process does (a run directory must be on shared storage), else a ``ValueError`` naming those
  that do not.
"""

from __future__ import annotations

import logging
import os
import secrets
import signal
import subprocess
import threading
import uuid
import warnings

import psutil
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

RAY_EXIT_GRACE_S = 2.0  # how long a local Ray's processes have to end after ray.shutdown()
# The reaper: reads pids until ``done`` (a clean shutdown: it exits) or the end of its pipe (its
# driver is gone: it kills each pid whose command line is still Ray's, not a reused pid's).
REAPER = (
    'pids=; while read -r pid; do [ "$pid" = done ] && exit 0; pids="$pids $pid"; done; '
    'for pid in $pids; do case "$(tr "\\000" " " < /proc/$pid/cmdline 2>/dev/null)" in '
    '*ray*) kill -9 "$pid" 2>/dev/null;; esac; done'
)


def _signal_handlers() -> dict:
    """This process's SIGTERM and SIGINT handlers (none from a thread other than the main one)."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}


def _token_notice(record: logging.LogRecord) -> bool:
    """A logging filter: drops Ray's note that a local instance uses token authentication (its default)."""
    return not record.getMessage().startswith("Token authentication is enabled for this Ray cluster")


_started_local = False  # (this process started the local Ray it is connected to)
_reaper: subprocess.Popen | None = None  # (its reaper, see the module)


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
    if ray_address and not os.environ.get("RAY_AUTH_TOKEN"):
        # A cluster with token authentication refuses a driver without a token on every try:
        # give up after ~5 tries (1 s each) instead of Ray's 20 (one without answers at once).
        os.environ.setdefault("RAY_gcs_server_port_wait_time_s", "5")
    global _started_local
    handlers = _signal_handlers()
    try:
        with warnings.catch_warnings():  # Ray fork+execs its processes; JAX warns of any fork
            warnings.filterwarnings("ignore", message="os.fork", category=RuntimeWarning)
            if not ray_address:  # (Ray's default, token authentication, needs no line on the terminal)
                logging.getLogger("ray._private.authentication.authentication_token_setup").addFilter(_token_notice)
            ray.init(
                address=ray_address,
                namespace=f"{namespace}-{uuid.uuid4().hex[:8]}",
                log_to_driver=True,
                logging_level=logging.WARNING,
                # (a local Ray: every CPU, no dashboard; a cluster's are its own)
                num_cpus=None if ray_address else os.cpu_count(),
                include_dashboard=None if ray_address else False,
            )
    except Exception as e:  # noqa: BLE001 -- turned into one line
        raise ValueError(_connect_error(ray_address, e)) from None
    finally:
        for sig, handler in handlers.items():  # (ray.init installs its own: SIGTERM would exit at once)
            signal.signal(sig, handler)
    _started_local = not ray_address
    if _started_local:
        _start_reaper()
    return True


def _ray_processes() -> list[psutil.Process]:
    """The processes of the local Ray this process started: its children that are Ray's (GCS,
    raylet, dashboard, log monitor: ``ray`` in their command line) and all of theirs (agents,
    workers), not its other children (a tracker's service)."""
    found = []
    for child in psutil.Process().children():
        try:
            command = " ".join(child.cmdline())
            if "/ray/" in command or command.startswith("ray::"):
                found += [child, *child.children(recursive=True)]
        except psutil.Error:
            pass
    return found


def _start_reaper() -> None:
    """Starts the reaper of the local Ray just started (see the module) and sends it the pids
    of Ray's processes (its agents are among them once ``ray.init`` returns)."""
    global _reaper
    try:
        with warnings.catch_warnings():  # (JAX warns of any fork; this one is a fork and exec)
            warnings.filterwarnings("ignore", message="os.fork", category=RuntimeWarning)
            _reaper = subprocess.Popen(
                ["sh", "-c", REAPER, "shoal-ray-reaper"],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                text=True,
                start_new_session=True,
            )  # (its own session: not a terminal's Ctrl-C)
        assert _reaper.stdin is not None
        _reaper.stdin.write("".join(f"{process.pid}\n" for process in _ray_processes()))
        _reaper.stdin.flush()
    except OSError:  # (no reaper: a clean shutdown still takes Ray down)
        _reaper = None


def shutdown_local() -> None:
    """Shuts down the local Ray this process started, and kills what of it is still there
    ``RAY_EXIT_GRACE_S`` later; its reaper is told it is done."""
    global _reaper, _started_local
    ours = _ray_processes()
    ray.shutdown()
    for process in psutil.wait_procs(ours, timeout=RAY_EXIT_GRACE_S)[1]:
        try:
            process.kill()
        except psutil.Error:
            pass
    if _reaper is not None and _reaper.stdin is not None:
        try:
            _reaper.stdin.write("done\n")
            _reaper.stdin.close()
            _reaper.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            _reaper.kill()
    _reaper, _started_local = None, False


def _connect_error(ray_address: str | None, e: Exception) -> str:
    where = f"the Ray cluster at {ray_address}" if ray_address else "a local Ray instance"
    text = (str(e).strip().splitlines() or [""])[0][:300]
    auth = "authentication" in f"{type(e).__name__} {e}".lower() or "token" in str(e).lower()
    if auth or (ray_address and not os.environ.get("RAY_AUTH_TOKEN")):
        return (
            f"{where} refused this driver ({type(e).__name__}: {text}); a cluster with token "
            "authentication needs RAY_AUTH_MODE=token and RAY_AUTH_TOKEN=<the cluster's token> in the "
            "driver's environment"
        )
    return f"cannot connect to {where} ({type(e).__name__}: {text}); is it running, and is --ray-address right?"


def check_shared_directory(path: str, timeout_s: float = 60.0, flag: str = "--run-dir") -> None:
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
        raise ValueError(f"cannot write to {base} (for {flag} {path}): {e.strerror or e}") from None
    try:
        nodes = {n["NodeID"]: n.get("NodeManagerAddress", "?") for n in ray.nodes() if n.get("Alive")}
        refs = {
            node_id: _read_probe.options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False)
            ).remote(probe)
            for node_id in nodes
        }
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
        raise ValueError(
            f"{flag} {path} is not on storage every host of the Ray cluster shares: "
            f"{', '.join(sorted(blind))} do(es) not see {base} as this host does; under Ray the run "
            "directory must be on a shared filesystem (e.g. NFS) mounted at the same path everywhere"
        )


@ray.remote(num_cpus=0)
def _read_probe(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None
