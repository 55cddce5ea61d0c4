"""``RayWorker``: one node of a program as a Ray actor, watched from the launcher's process.

* Placement: by the group's ``Resources``; a node the program colocates with another
  (``Program.colocate``) is created on that node's Ray node once it is known
  (``NodeAffinitySchedulingStrategy``, not soft).
* Pending: until the actor answers its first ping it is *pending*. If Ray has found no machine
  for it after ``PENDING_WARN_S`` and no node has what it asks for free (at two checks
  ``PENDING_CONFIRM_S`` apart), a warning names what it asked for and what each node has free;
  it stays pending (shown so in the node table) until resources free up.
* Partitions: the launcher pings every placed node every ``PING_EVERY_S``. A node silent for
  ``SILENT_WARN_S`` gets a warning (and a line when it answers again); one silent for
  ``peer_timeout_s`` has failed: the program ends with that cause (which node, which host).
* A node that died carries the exception that ended it (a ``RayTaskError``'s cause, e.g.
  ``TimeoutError: RPC increment at 10.0.0.1:47001: no reply within 60s``) into the failure.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from shoal.launch.programs.program import Node

# (PENDING_CONFIRM_S: a node whose worker process takes longer to start than this, Ray's
# reservation for it held meanwhile, is reported as unplaceable: 5 s was too short once, under a
# load of 14 on 2 cores, for a learner that then started)
PING_EVERY_S, SILENT_WARN_S, PENDING_WARN_S, PENDING_CONFIRM_S = 2.0, 5.0, 10.0, 20.0


def _say(text: str) -> None:
    print(f"shoal: warning: {text}", file=sys.stderr, flush=True)


def requested(options: dict[str, Any]) -> dict[str, float]:
    """What an actor made with ``options`` needs free on a node to be placed (Ray reserves
    1 CPU for an actor's placement when it names no ``num_cpus``)."""
    wanted = {"CPU": float(options.get("num_cpus", 1))}
    if options.get("num_gpus"):
        wanted["GPU"] = float(options["num_gpus"])
    if options.get("memory"):
        wanted["memory"] = float(options["memory"])
    wanted.update({k: float(v) for k, v in (options.get("resources") or {}).items()})
    return {k: v for k, v in wanted.items() if v > 0}


def _free_per_node() -> dict[str, tuple[str, dict[str, float], dict[str, float]]]:
    """``{node_id: (ip, free, total)}`` of the cluster's alive nodes (empty if Ray cannot say)."""
    try:
        from ray._private import state  # lazy: optional extra (ray), a private module

        free = state.available_resources_per_node()
        nodes = {n["NodeID"]: n for n in ray.nodes() if n.get("Alive")}
    except Exception:  # noqa: BLE001 -- (a private API: a warning without the table then)
        return {}
    return {
        node_id: (n.get("NodeManagerAddress", "?"), free.get(node_id, {}), n.get("Resources", {}))
        for node_id, n in nodes.items()
    }


def _fits(wanted: dict[str, float], free: dict[str, float]) -> bool:
    return all(free.get(name, 0.0) >= amount for name, amount in wanted.items())


def _unplaced(actor: Any) -> bool:
    """Whether Ray has no worker process for ``actor`` yet (it is not merely starting)."""
    try:
        from ray._private import state  # lazy: optional extra (ray), a private module

        record = state.actors(actor._actor_id.hex())
    except Exception:  # noqa: BLE001 -- (a private API: no warning then)
        return False
    return record.get("State") == "PENDING_CREATION" and not record.get("Pid")


def _show(amounts: dict[str, float]) -> str:
    return ", ".join(
        f"{k}={v / 2**30:.1f}GiB" if k == "memory" else f"{k}={v:g}"
        for k, v in sorted(amounts.items())
        if not k.startswith("node:") and k != "object_store_memory"
    )


class RayWorker:
    managed_restarts = True

    def __init__(
        self,
        node: Node,
        make_actor: Callable[[dict[str, Any]], Any],
        options: dict[str, Any],
        beside: Callable[[], RayWorker | None] | None,
        starts: Callable[[], dict[str, int]],
        peer_timeout_s: float,
    ) -> None:
        self.node, self._make_actor, self._options = node, make_actor, options
        self._beside, self._starts, self._peer_timeout_s = beside, starts, peer_timeout_s
        self.actor: Any = None  # (the Ray actor, once created)
        self.ref: Any = None  # (the object ref of its run())
        self.log_path = f"streamed here; `ray logs actor --id <id of {node.label}>`"
        self.failure: str | None = None  # why it failed, in one line
        self.where: tuple[str, str] | None = None  # (Ray node id, IP) once placed
        self._code: int | None = None
        self._result: Any = None
        self._restarts, self._closed = 0, False
        self._created_at = 0.0
        self._ping: Any = None
        self._ping_sent = 0.0
        self._silent_warned = self._pending_warned = False
        self._next_check = 0.0
        self._unfit_since: float | None = None  # (when a check first found it unplaceable)

    # -- starting -----------------------------------------------------------------------------
    def start(self) -> None:
        self._created_at = time.monotonic()
        if self._beside is None:
            self._create(self._options)
        else:  # (the node it goes beside may not be placed yet: do not hold the launch up)
            threading.Thread(target=self._create_beside, name=f"place-{self.node.label}", daemon=True).start()

    def _create(self, options: dict[str, Any]) -> None:
        self.actor = self._make_actor(options)
        self.ref = self.actor.run.remote()
        self.log_path = f"`ray logs actor --id {self.actor._actor_id.hex()}`"
        self._send_ping()

    def _create_beside(self) -> None:
        beside = self._beside  # (set: start() runs this only for a node placed beside another)
        while beside is not None and not self._closed:
            anchor = beside()
            if anchor is not None and anchor.where is not None:
                strategy = NodeAffinitySchedulingStrategy(anchor.where[0], soft=False)
                if not self._closed:
                    self._create({**self._options, "scheduling_strategy": strategy})
                return
            time.sleep(0.1)

    @property
    def pending(self) -> bool:
        """Not placed (or not started) yet."""
        return self._code is None and self.where is None

    # -- watching -----------------------------------------------------------------------------
    def _send_ping(self) -> None:
        self._ping, self._ping_sent = self.actor.where.remote(), time.monotonic()

    def _watch(self) -> None:
        now = time.monotonic()
        if self.actor is None or self._ping is None:
            if self.pending and not self._pending_warned and now - self._created_at > 2 * PENDING_WARN_S:
                self._pending_warned = True
                _say(f"{self.node.label} waits for its colocated node to be placed")
            return
        if ray.wait([self._ping], timeout=0)[0]:
            try:
                where = ray.get(self._ping)
            except ray.exceptions.RayError:  # (died: poll() reports it; restarting: pinged again)
                where = None
            if where is not None:
                if self._silent_warned:
                    _say(f"{self.node.label} on {where[1]} answers again after {now - self._ping_sent:.0f}s")
                self.where, self._silent_warned = tuple(where[:2]), False
                if where[2]:  # (its output goes to the run directory's logs/)
                    self.log_path = where[2]
            self._ping = None  # (the next one when PING_EVERY_S have passed since this one was sent)
            return
        silent = now - self._ping_sent
        if self.where is None:
            if not self._pending_warned and now - self._created_at > PENDING_WARN_S and now >= self._next_check:
                self._next_check = now + 1.0  # (asks Ray's GCS at most once a second)
                self._warn_unplaceable()
        elif silent > self._peer_timeout_s:
            self.failure = (
                f"no answer from {self.node.label} on {self.where[1]} for {silent:.0f}s "
                f"(a network partition, or a frozen host; SHOAL_PEER_TIMEOUT_S={self._peer_timeout_s:g})"
            )
            self._code = 1
        elif silent > SILENT_WARN_S and not self._silent_warned:
            self._silent_warned = True
            _say(
                f"{self.node.label} on {self.where[1]} has not answered for {silent:.0f}s (cut off by the "
                f"network, frozen, or restarting?); the run fails if it stays silent for {self._peer_timeout_s:g}s"
            )

    def _warn_unplaceable(self) -> None:
        """Warns once that the node cannot be placed, when two checks ``PENDING_CONFIRM_S`` apart
        found it so: Ray may reserve a node's resources before its actor record shows the worker
        process, and for that moment a node being started looks unplaceable (its own reservation
        counted against it)."""
        now = time.monotonic()
        if not _unplaced(self.actor):
            self._unfit_since = None
            return  # (placed: still starting)
        wanted = requested(self._options)
        nodes = _free_per_node()
        anchor = self._beside() if self._beside is not None else None
        if anchor is not None and anchor.where is not None:
            nodes = {k: v for k, v in nodes.items() if k == anchor.where[0]}
        if not nodes or any(_fits(wanted, free) for _, free, _ in nodes.values()):
            self._unfit_since = None
            return  # (it fits: a worker process is still being started for it)
        if self._unfit_since is None or now - self._unfit_since < PENDING_CONFIRM_S:
            self._unfit_since = self._unfit_since or now
            return
        self._pending_warned = True
        where = f"beside {anchor.node.label}" if anchor is not None else "on any node"
        table = "; ".join(
            f"{ip}: free {_show(free) or 'nothing'} of {_show(total)}" for ip, free, total in nodes.values()
        )
        _say(
            f"{self.node.label} cannot be placed {where}: it asks for {_show(wanted)} and no node has that "
            f"free ({table}); it stays pending until resources free up (a node given resources but no "
            f"num_cpus reserves 1 CPU: see --resources)"
        )

    def poll(self) -> int | None:
        if self._code is None and self.ref is not None and ray.wait([self.ref], timeout=0)[0]:
            try:
                self._result, self._code = ray.get(self.ref), 0
            except ray.exceptions.RayError as e:  # died for good (or raised)
                cause = getattr(e, "cause", None) or e
                first = (str(cause).strip().splitlines() or [""])[0]
                self.failure = f"{type(cause).__name__}: {first}"[:400]
                self._code = 1
        if self._code is None:
            self._watch()
            if self._ping is None and self.actor is not None and time.monotonic() - self._ping_sent >= PING_EVERY_S:
                self._send_ping()
        return self._code

    # -- ending -------------------------------------------------------------------------------
    @property
    def restarts(self) -> int:
        """Restarts Ray made (counted by the address book; the last count once closed)."""
        if not self._closed:
            self._restarts = max(0, self._starts().get(self.node.label, 1) - 1)
        return self._restarts

    def close(self) -> None:
        try:
            _ = self.restarts  # keep the final count for the summary
        except Exception:  # noqa: BLE001 -- (the address book is unreachable)
            pass
        self._closed = True
        self.kill()

    def terminate(self) -> None:
        if self.actor is not None:
            self.actor.stop.remote()

    def kill(self) -> None:
        self._closed = True
        if self.actor is not None:
            ray.kill(self.actor, no_restart=True)

    def result(self) -> Any:
        return self._result

    def pid(self) -> int | None:
        return None  # (a process Ray manages, maybe on another machine)
