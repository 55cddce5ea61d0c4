"""The Ray launcher: every node a Ray actor, placed by its group's ``Resources``.

* Without ``ray_address`` a local Ray instance is started with this machine's CPUs; with one
  (``auto``, ``HOST:PORT``) the program joins that cluster. Each launch gets its own namespace;
  actors are named by node label.
* Addresses live in a named actor (``RayAddressBook``): no shared filesystem. Servers bind
  every interface, advertise their node's IP, and require the launch's token, which reaches
  the nodes as an actor constructor argument (never a command line).
* Supervision uses Ray's own restart machinery: a node of a restartable group (``Program.group``)
  gets ``max_restarts`` and its ``run`` is retried after a restart; any other node's death ends
  the program. Stopping asks every node to stop, then kills every actor the launch made. Node output
  streams to this process (prefixed with the node's label).
* Environment: ``group_env`` plus this process's ``SHOAL_*``, ``JAX_*``, ``XLA_*`` and
  ``TF_CPP_*`` variables are set in the actors' processes (Ray's ``runtime_env``).

Ray itself moves constructor arguments and results with pickle inside the cluster: run Ray
clusters on machines and networks you trust (as Ray's own documentation says).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import uuid
import warnings
from typing import Any, Mapping

import ray

from shoal.launch.programs.addressing import AddressBook
from shoal.launch.programs.nodes import NodeContext, set_context
from shoal.launch.programs.program import Node, Program
from shoal.launch.programs.resources import Resources
from shoal.launch.programs.supervision import ProgramRun

FORWARDED_ENV = ("SHOAL_", "JAX_", "XLA_", "TF_CPP_")


@ray.remote(num_cpus=0)
class _Addresses:
    def __init__(self) -> None:
        self._addresses: dict[str, str] = {}
        self._starts: dict[str, int] = {}

    def publish(self, label: str, address: str) -> None:
        self._addresses[label] = address

    def get(self, label: str) -> str | None:
        return self._addresses.get(label)

    def started(self, label: str) -> int:
        self._starts[label] = self._starts.get(label, 0) + 1
        return self._starts[label]

    def starts(self) -> dict[str, int]:
        return dict(self._starts)


class RayAddressBook(AddressBook):
    """Addresses in the launch's named ``_Addresses`` actor."""

    def __init__(self, actor: Any) -> None:
        self._actor = actor

    def publish(self, label: str, address: str) -> None:
        ray.get(self._actor.publish.remote(label, address), timeout=60)

    def get(self, label: str) -> str | None:
        return ray.get(self._actor.get.remote(label), timeout=60)


@ray.remote(max_concurrency=4)  # run() occupies one thread; stop() must get through
class _NodeActor:
    def __init__(self, node: Node, addresses: Any, token: str) -> None:
        self._node = node
        start = ray.get(addresses.started.remote(node.label))
        self._ctx = NodeContext(node.label, node.group, RayAddressBook(addresses), token,
                                bind_host="0.0.0.0", advertise_host=ray.util.get_node_ip_address(),
                                start_count=start)
        set_context(self._ctx, process_wide=True)
        print(f"[{node.label}] started (pid {os.getpid()}, node {ray.get_runtime_context().get_node_id()} "
              f"at {self._ctx.advertise_host}, group {node.group}"
              f"{f', restart {start - 1}' if start > 1 else ''})", flush=True)

    def run(self) -> Any:
        return self._node.run(self._ctx)

    def stop(self) -> None:
        self._ctx.stop_event.set()

    def __repr__(self) -> str:  # Ray prefixes the streamed log lines with this
        return self._node.label


def _actor_options(resources: Resources | None, restartable: bool, max_restarts: int,
                   env: Mapping[str, str]) -> dict[str, Any]:
    options: dict[str, Any] = {"max_restarts": max_restarts if restartable else 0,
                               "max_task_retries": -1 if restartable else 0,
                               "runtime_env": {"env_vars": dict(env)}}
    if resources is not None:
        for name in ("num_cpus", "num_gpus", "memory"):
            if getattr(resources, name) is not None:
                options[name] = getattr(resources, name)
        if resources.custom:
            options["resources"] = dict(resources.custom)
    return options


class RayWorker:
    managed_restarts = True

    def __init__(self, node: Node, addresses: Any, token: str, options: dict[str, Any]) -> None:
        self.node, self._addresses, self._token, self._options = node, addresses, token, options
        self.actor = self.ref = None
        self.log_path = f"streamed here; `ray logs actor --id <id of {node.label}>`"
        self._code: int | None = None
        self._result: Any = None
        self._restarts, self._closed = 0, False

    def start(self) -> None:
        self.actor = _NodeActor.options(name=self.node.label, **self._options).remote(
            self.node, self._addresses, self._token)
        self.ref = self.actor.run.remote()
        self.log_path = f"`ray logs actor --id {self.actor._actor_id.hex()}`"

    def poll(self) -> int | None:
        if self._code is None and ray.wait([self.ref], timeout=0)[0]:
            try:
                self._result, self._code = ray.get(self.ref), 0
            except ray.exceptions.RayError as e:  # died for good (or raised)
                print(f"[launcher] {self.node.label}: {type(e).__name__}: {str(e).splitlines()[0]}",
                      file=sys.stderr, flush=True)
                self._code = 1
        return self._code

    @property
    def restarts(self) -> int:
        """Restarts Ray made (counted by the address book; the last count once closed)."""
        if not self._closed:
            starts = ray.get(self._addresses.starts.remote(), timeout=10)
            self._restarts = max(0, starts.get(self.node.label, 1) - 1)
        return self._restarts

    def close(self) -> None:
        _ = self.restarts  # keep the final count for the summary
        self._closed = True
        if self.actor is not None:
            ray.kill(self.actor, no_restart=True)

    def terminate(self) -> None:
        self.actor.stop.remote()

    def kill(self) -> None:
        ray.kill(self.actor, no_restart=True)

    def result(self) -> Any:
        return self._result

    def pid(self) -> int | None:
        return None  # (a process Ray manages, maybe on another machine)


def _signal_handlers() -> dict:
    """This process's SIGTERM and SIGINT handlers (none from a thread other than the main one)."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}


def launch_ray(program: Program, *, token: str, group_env: Mapping[str, Mapping[str, str]],
               ray_address: str | None, max_restarts: int, grace_s: float,
               before_stop=None) -> ProgramRun:
    started_ray = not ray.is_initialized()
    if started_ray:
        local = {} if ray_address else {"num_cpus": os.cpu_count(), "include_dashboard": False}
        handlers = _signal_handlers()
        with warnings.catch_warnings():  # Ray fork+execs its processes; JAX warns of any fork
            warnings.filterwarnings("ignore", message="os.fork", category=RuntimeWarning)
            ray.init(address=ray_address, namespace=f"shoal-{program.name}-{uuid.uuid4().hex[:8]}",
                     log_to_driver=True, logging_level="warning", **local)
        for sig, handler in handlers.items():  # (ray.init installs its own: SIGTERM would exit at once)
            signal.signal(sig, handler)
    addresses = _Addresses.options(name="addresses").remote()
    forwarded = {k: v for k, v in os.environ.items() if k.startswith(FORWARDED_ENV)}
    workers: list[RayWorker] = []

    def make_worker(node: Node) -> RayWorker:
        env = {**forwarded, **group_env.get(node.group, {})}
        options = _actor_options(program.resources.get(node.group),
                                 node.group in program.restartable, max_restarts, env)
        workers.append(RayWorker(node, addresses, token, options))
        return workers[-1]

    def close() -> None:  # every actor this launch made, finished or not
        for worker in workers:
            worker.close()
        ray.kill(addresses, no_restart=True)
        if started_ray:
            ray.shutdown()

    return ProgramRun(program, make_worker, launcher="ray", address_book=RayAddressBook(addresses),
                      token=token, max_restarts=max_restarts, grace_s=grace_s, on_close=close,
                      before_stop=before_stop)
