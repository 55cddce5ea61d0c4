"""The Ray launcher: every node a Ray actor, placed by its group's ``Resources``.

* The driver joins a cluster or starts a local Ray (``shoal.launch.programs.ray.cluster``);
  each launch gets its own namespace; actors are named by node label.
* Placement: by each group's ``Resources``; nodes of a group the program colocates with a node
  (``Program.colocate``) run on that node's machine. A node that cannot be placed is *pending*
  and warned about (``shoal.launch.programs.ray.worker``).
* Addresses live in a named actor on the driver's machine
  (``shoal.launch.programs.ray.addresses``): no shared filesystem. Servers listen on a port of
  ``ports`` (default ``DEFAULT_PORTS``, so that a firewall between the hosts can allow one range)
  and require the launch's token, which reaches the nodes as an actor constructor argument
  (never a command line). On a cluster (``ray_address``) they bind every interface and advertise
  their node's IP; on a local Ray this launch started, loopback (``bind_hosts``: nothing off this
  machine can reach them), unless ``host`` names another interface.
* Supervision uses Ray's own restart machinery: a node of a restartable group (``Program.group``)
  gets ``max_restarts`` and its ``run`` is retried after a restart; any other node's death ends
  the program, with its cause. The launcher pings every node; one silent for ``peer_timeout_s``
  (``SHOAL_PEER_TIMEOUT_S``, default 60) has failed. A node that cannot reach the launcher's
  address book for as long exits by itself (removing its shared-memory segments): no orphan is
  left on a host cut off from the program. Stopping asks every node to stop, then kills every
  actor the launch made and removes the shared-memory segments of killed nodes. A local Ray this
  launch started is shut down with it (``shoal.launch.programs.ray.cluster.shutdown_local``; if
  this process is killed, its reaper takes that Ray down): nothing it started outlives the run.
  Node output streams to this process (prefixed with the node's label).
* Environment: ``group_env`` plus this process's ``SHOAL_*``, ``JAX_*``, ``XLA_*`` and
  ``TF_CPP_*`` variables are set in the actors' processes (Ray's ``runtime_env``).

Ray itself moves constructor arguments and results with pickle inside the cluster: run Ray
clusters on machines and networks you trust (as Ray's own documentation says).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Mapping
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from shoal.core.environment_variables import value
from shoal.core.files import open_append
from shoal.core.shared_memory import process_alive, sweep_segments
from shoal.launch.programs.nodes import NodeContext, set_context
from shoal.launch.programs.program import Node, Program
from shoal.launch.programs.ray.addresses import Addresses, RayAddressBook
from shoal.launch.programs.ray.cluster import connect, shutdown_local, started_local
from shoal.launch.programs.ray.worker import RayWorker
from shoal.launch.programs.resources import Resources
from shoal.launch.programs.supervision import ProgramRun

FORWARDED_ENV = ("SHOAL_", "JAX_", "XLA_", "TF_CPP_")
DEFAULT_PORTS = (47000, 47099)
WATCHDOG_EVERY_S = 2.0


def peer_timeout_s() -> float:
    """Seconds a node may go unheard before it counts as lost (``SHOAL_PEER_TIMEOUT_S``, default 60)."""
    return value("SHOAL_PEER_TIMEOUT_S")


# run() occupies one thread; stop() and where() must get through. (Ray's stubs type remote()'s keywords
# as a task's: max_concurrency, an actor's, is not among them.)
@ray.remote(max_concurrency=4)  # type: ignore[call-overload]
class _NodeActor:
    def __init__(
        self,
        node: Node,
        addresses: Any,
        token: str,
        ports: tuple[int, int] | None,
        peer_timeout: float,
        log_dir: str | None = None,
        host: str | None = None,
        local: bool = False,
    ) -> None:
        self._node, self._addresses = node, addresses
        self._log = _output_to(log_dir, node.label)
        self._where = (ray.get_runtime_context().get_node_id(), ray.util.get_node_ip_address())
        start = ray.get(addresses.started.remote(node.label, self._where[0], os.getpid()))
        bind, advertise = bind_hosts(host, local, self._where[1])
        self._ctx = NodeContext(
            node.label,
            node.group,
            RayAddressBook(addresses),
            token,
            bind_host=bind,
            advertise_host=advertise,
            start_count=start,
            ports=ports,
        )
        set_context(self._ctx, process_wide=True)
        threading.Thread(target=self._watchdog, args=(peer_timeout,), name="watchdog", daemon=True).start()
        print(
            f"[{node.label}] started (pid {os.getpid()}, node {self._where[0]} at {self._where[1]}, "
            f"group {node.group}{f', restart {start - 1}' if start > 1 else ''})",
            flush=True,
        )

    def _watchdog(self, peer_timeout: float) -> None:
        """Exits this process once the launcher's address book has been unreachable for
        ``peer_timeout`` seconds (the launcher is gone, or this host is cut off from it)."""
        heard = time.monotonic()
        while True:
            try:
                ray.get(self._addresses.alive.remote(), timeout=WATCHDOG_EVERY_S * 2)
                heard = time.monotonic()
            except Exception:  # noqa: BLE001 -- unreachable (timed out) or gone (killed)
                if time.monotonic() - heard > peer_timeout:
                    print(
                        f"[{self._node.label}] has not reached the launcher for {peer_timeout:g}s: exiting "
                        "(cut off from the program, or the program ended)",
                        file=sys.stderr,
                        flush=True,
                    )
                    sweep_segments([os.getpid()], even_alive=True)
                    os._exit(1)
            time.sleep(WATCHDOG_EVERY_S)

    def where(self) -> tuple[str, str, str | None]:
        """(Ray node id, IP) of this node's machine, and the log file its output goes to (``None``:
        Ray streams it to the driver); answering is also its sign of life."""
        return (*self._where, self._log)

    def run(self) -> Any:
        return self._node.run(self._ctx)

    def stop(self) -> None:
        self._ctx.stop_event.set()

    def __repr__(self) -> str:  # Ray prefixes the streamed log lines with this
        return self._node.label


def bind_hosts(host: str | None, local: bool, node_ip: str) -> tuple[str, str]:
    """``(bind, advertise)``: the interface a node's servers bind and the host they advertise.
    ``host`` if the user named one; else loopback on a local Ray (``local``: this launch started
    it, every node is on this machine), every interface on a cluster. Bound to every interface,
    a node advertises its machine's IP (``node_ip``)."""
    if host is None:
        host = "127.0.0.1" if local else "0.0.0.0"
    return host, node_ip if host in ("0.0.0.0", "::") else host


def _output_to(log_dir: str | None, label: str) -> str | None:
    """Sends this process's stdout and stderr (file descriptors 1 and 2: native libraries' lines
    too) to ``log_dir/<label>.log``, appended, as the processes launcher keeps a node's output,
    if ``log_dir`` is a folder on this machine; returns the file, or ``None`` (Ray's log
    forwarding then streams the output to the driver, as before)."""
    if not log_dir or not os.path.isdir(log_dir):
        return None
    path = os.path.join(log_dir, f"{label}.log")
    try:
        log = open_append(path)  # (never through a link planted in logs/)
    except OSError:
        return None
    sys.stdout.flush()
    sys.stderr.flush()
    with log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
    # (Python's streams too, whatever Ray made of them: line-buffered onto the new descriptors)
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115 -- the process's own, never closed
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115 -- as stdout
    return path


@ray.remote(num_cpus=0)
def _sweep(pids: list[int], wait_s: float) -> int:
    """On one machine: waits up to ``wait_s`` for ``pids`` to end, then removes their segments."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and any(process_alive(pid) for pid in pids):
        time.sleep(0.1)
    return len(sweep_segments(pids))


def _actor_options(
    resources: Resources | None, restartable: bool, max_restarts: int, env: Mapping[str, str]
) -> dict[str, Any]:
    options: dict[str, Any] = {
        "max_restarts": max_restarts if restartable else 0,
        "max_task_retries": -1 if restartable else 0,
        "runtime_env": {"env_vars": dict(env)},
    }
    if resources is not None:
        for name in ("num_cpus", "num_gpus", "memory"):
            if getattr(resources, name) is not None:
                options[name] = getattr(resources, name)
        if resources.custom:
            options["resources"] = dict(resources.custom)
    return options


def launch_ray(
    program: Program,
    *,
    token: str,
    group_env: Mapping[str, Mapping[str, str]],
    ray_address: str | None,
    max_restarts: int,
    grace_s: float,
    ports: tuple[int, int] | None = DEFAULT_PORTS,
    before_stop=None,
    log_dir: str | None = None,
    host: str | None = None,
) -> ProgramRun:
    peer_timeout = peer_timeout_s()
    started_ray = connect(ray_address, namespace=f"shoal-{program.name}")
    local = ray_address is None and (started_ray or started_local())  # (a local Ray of this process's)
    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    # (mypy keeps a decorated class's own type, python/mypy#3135: Ray's actor class has options())
    addresses = Addresses.options(name="addresses", scheduling_strategy=here).remote()  # type: ignore[attr-defined]
    forwarded = {k: v for k, v in os.environ.items() if k.startswith(FORWARDED_ENV)}
    workers: dict[str, RayWorker] = {}

    def make_worker(node: Node) -> RayWorker:
        env = {**forwarded, **group_env.get(node.group, {})}
        options = _actor_options(
            program.resources.get(node.group), node.group in program.restartable, max_restarts, env
        )
        anchor = program.placed_beside(node)
        if anchor:  # (pinned beside its anchor, it needs no CPU of its own to be placed there)
            options.setdefault("num_cpus", 0)

        def make_actor(opts: dict[str, Any]) -> Any:
            return _NodeActor.options(  # type: ignore[attr-defined]  # (as Addresses.options above)
                name=node.label, **opts
            ).remote(node, addresses, token, ports, peer_timeout, log_dir, host, local)

        workers[node.label] = RayWorker(
            node,
            make_actor,
            options,
            (lambda: workers.get(anchor)) if anchor else None,
            lambda: ray.get(addresses.starts.remote(), timeout=10),
            peer_timeout,
        )
        return workers[node.label]

    def close() -> None:  # every actor this launch made, finished or not, and what killed ones left
        try:
            pids = ray.get(addresses.pids.remote(), timeout=10)
        except Exception:  # noqa: BLE001
            pids = {}
        for worker in workers.values():
            worker.close()
        by_node: dict[str, list[int]] = {}
        for node_id, pid in pids.values():
            by_node.setdefault(node_id, []).append(pid)
        sweeps = [
            _sweep.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False)).remote(
                node_pids, 5.0
            )
            for node_id, node_pids in by_node.items()
        ]
        ray.wait(sweeps, num_returns=len(sweeps), timeout=6)  # (a host cut off: its nodes sweep themselves)
        ray.kill(addresses, no_restart=True)
        if started_ray or started_local():  # (a local Ray this process started, here or before the launch)
            shutdown_local()

    return ProgramRun(
        program,
        make_worker,
        launcher="ray",
        address_book=RayAddressBook(addresses),
        token=token,
        max_restarts=max_restarts,
        grace_s=grace_s,
        on_close=close,
        before_stop=before_stop,
    )
