"""``ProgramRun``: a launched program's nodes, their supervision, and how the program ends.

Each node runs in a *worker* (a thread, a process, a Ray actor; see the launchers), which the
supervisor polls. A node's state moves along::

    pending -> running                   the engine placed it (Ray; local launchers start nodes running)
    running -> done                      its run() returned (the program completes once every
                                         node with ``ends_program`` is done)
    running -> restarting -> running     it crashed, its group is restartable, it has restarts
                                         left and its failure is not ``final`` (backoff
                                         0.5 * 2**k s); an engine with its own restart
                                         machinery (Ray) restarts it instead
    running -> failed                    it crashed for good: the program fails
    running -> removing -> removed       its group was scaled down (``shoal.launch.programs.scaling``)
    running -> stopped | killed          the program ended: asked to stop, or killed after the grace
    pending                              (also at the end) it was never placed

How the program ends (``stop()``, ``hurry()``, ``wait()`` and the ``before_stop(run)`` hook) is
``shoal.launch.programs.stopping``'s, mixed into ``ProgramRun`` like the elastic groups of
``shoal.launch.programs.scaling``.
Every node's return value is its result (``results()``); ``client(label)`` talks to a node.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from shoal.launch.programs.addressing import AddressBook
from shoal.launch.programs.nodes import NodeContext
from shoal.launch.programs.program import Node, Program
from shoal.launch.programs.scaling import ElasticGroups
from shoal.launch.programs.states import LIVE, NodeState, Worker
from shoal.launch.programs.stopping import ProgramEnding


def _placed_state(worker: Worker) -> NodeState:
    """``pending`` while an engine that places nodes (Ray) has not placed it, else ``running``."""
    return NodeState.PENDING if getattr(worker, "pending", False) else NodeState.RUNNING


class ProgramRun(ElasticGroups, ProgramEnding):
    def __init__(
        self,
        program: Program,
        make_worker: Callable[[Node], Worker],
        *,
        launcher: str,
        address_book: AddressBook,
        token: str | None,
        max_restarts: int = 3,
        grace_s: float = 5.0,
        run_dir: str | None = None,
        on_close: Callable[[], None] | None = None,
        before_stop: Callable[[ProgramRun], None] | None = None,
    ) -> None:
        self.program, self.launcher, self.run_dir = program, launcher, run_dir
        self._make_worker, self._before_stop = make_worker, before_stop
        self.closers: list[Callable[[], None]] = [on_close] if on_close is not None else []  # run at the end
        self._context = NodeContext("launcher", "launcher", address_book, token)
        self._max_restarts, self._grace_s = max_restarts, grace_s
        self.workers: dict[str, Worker] = {}
        self.states: dict[str, NodeState] = {}
        self.exit_codes: dict[str, int] = {}
        self.restarts: dict[str, int] = {}
        self._restart_at: dict[str, float] = {}
        self._remove_by: dict[str, float] = {}
        self._lock = threading.RLock()
        self._done = threading.Event()
        self._hurry = threading.Event()
        self._finishing = False
        self.reason, self.failed, self.stop_error = "", False, None
        self.start_time = time.monotonic()
        for node in program.nodes:
            self._start(node)
        self._thread = threading.Thread(target=self._supervise, name="supervisor", daemon=True)
        self._thread.start()

    def _start(self, node: Node) -> None:
        worker = self._make_worker(node)
        self.workers[node.label], self.states[node.label], self.restarts[node.label] = worker, NodeState.RUNNING, 0
        worker.start()
        self.states[node.label] = _placed_state(worker)

    def client(self, label: str, timeout_s: float = 300.0) -> Any:
        """A client to node ``label`` (what a handle to it becomes inside a node), once it has
        published its address: waits while the node is starting (a learner restoring a
        checkpoint on a busy machine may take a while), fails at once if it ended first, and
        after ``timeout_s`` if it neither published nor ended."""
        deadline = time.monotonic() + timeout_s
        while (address := self._context.address_book.get(label)) is None:
            with self._lock:
                state = self.states.get(label)
            if state not in LIVE:
                raise RuntimeError(
                    f"node {label!r} ended ({state.value if state else 'never started'}) before "
                    "it published its address (see its log)"
                )
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"node {label!r} published no address within {timeout_s:g}s while it ran "
                    "(is it stuck starting? see its log)"
                )
            time.sleep(0.05)
        return self.workers[label].node.make_client(address, self._context)

    def is_running(self, label: str) -> bool:
        """Whether node ``label`` is running now (not restarting, ended, failed or pending)."""
        with self._lock:
            return self.states.get(label) == NodeState.RUNNING and self.workers[label].poll() is None

    def serving(self, label: str) -> bool:
        """Whether node ``label`` published its address in this launch (it serves, or did);
        ``False`` once the address book is gone (the program ended and closed under the caller)."""
        try:
            return self._context.address_book.get(label) is not None
        except Exception:  # noqa: BLE001 -- (Ray's address book actor, killed by the program's close)
            return False

    def pids(self) -> dict[str, int]:
        """``{label: pid}`` of the nodes that run as processes of this machine."""
        return {label: pid for label, w in self.workers.items() if (pid := w.pid()) is not None}

    # -- supervision --------------------------------------------------------------------------
    def _supervise(self) -> None:
        while not self._finishing:
            with self._lock:
                ending = self._check()
            if ending is not None:
                self._finish(*ending)
                return
            time.sleep(0.1)

    def _check(self) -> tuple[str, bool] | None:
        """Acts on what the workers did; returns ``(reason, failed)`` once the program ends."""
        now = time.monotonic()
        for label, worker in list(self.workers.items()):
            state = self.states[label]
            if state == NodeState.RESTARTING and now >= self._restart_at[label]:
                worker.start()
                state = self.states[label] = NodeState.RUNNING
            if state not in (NodeState.PENDING, NodeState.RUNNING, NodeState.REMOVING):
                continue
            code = worker.poll()
            if code is None and state != NodeState.REMOVING:
                state = self.states[label] = _placed_state(worker)
            if code is None:
                if state == NodeState.REMOVING and now > self._remove_by[label]:
                    worker.kill()
                    self.states[label] = NodeState.REMOVED
                continue
            self.exit_codes[label] = code
            if state == NodeState.REMOVING:
                self.states[label] = NodeState.REMOVED
                worker.kill()  # (an engine's worker may outlive its node: a Ray actor does)
            elif code == 0:
                self.states[label] = NodeState.DONE
                finishers = [n.label for n in self.program.nodes if n.ends_program]
                if finishers and all(self.states[f] == NodeState.DONE for f in finishers):
                    return f"{', '.join(finishers)} finished", False
            elif (
                not worker.managed_restarts
                and worker.node.group in self.program.restartable
                and self.restarts[label] < self._max_restarts
                and not getattr(worker, "final", False)
            ):
                self.restarts[label] += 1
                backoff = 0.5 * 2 ** (self.restarts[label] - 1)
                print(
                    f"[launcher] {label} exited with {code}; restart {self.restarts[label]}/"
                    f"{self._max_restarts} in {backoff:.1f}s",
                    file=sys.stderr,
                    flush=True,
                )
                self.states[label], self._restart_at[label] = NodeState.RESTARTING, now + backoff
            else:
                self.states[label] = NodeState.FAILED
                failure = getattr(worker, "failure", None)
                if failure:
                    return f"{label} failed: {failure} (see {worker.log_path})", True
                return f"{label} exited with code {code} (see {worker.log_path})", True
        return None
