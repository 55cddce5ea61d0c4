"""``ProgramRun``: a launched program's nodes, their supervision, and how the program ends.

Each node runs in a *worker* (a thread, a process, a Ray actor; see the launchers), which the
supervisor polls:

* a node of a restartable group (default: ``actor``) that crashes is restarted, at most
  ``max_restarts`` times, after a backoff of ``0.5 * 2**k`` seconds -- by the supervisor, or by
  the engine itself where it has restart machinery (Ray: ``worker.managed_restarts``);
* the program completes when all its function nodes have returned (e.g. the evaluator that
  stops at the step budget), and fails when any other node dies for good;
* ``stop()`` asks every node to stop (``should_stop()`` turns true), users before the services
  they use, then kills what is left after the grace period.

A group made with ``Program.add_group`` can grow and shrink while the program runs
(``add_nodes`` / ``remove_nodes`` / ``scale``): a removed node is asked to stop like at the end
of a program, and its exit is not a failure. ``serve_control()`` exposes ``scale`` and
``status`` on loopback RPC for the ``shoal scale`` command.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import sys
import threading
import time
from typing import Any, Callable, Protocol

from shoal.launch.programs.program import Node, Program


class ProgramFailed(RuntimeError):
    pass


class Worker(Protocol):
    node: Node
    log_path: str             # where the node's output goes
    managed_restarts: bool    # True: the engine restarts the node itself
    restarts: int             # restarts so far, if managed

    def start(self) -> None: ...
    def poll(self) -> int | None: ...   # exit code once the node ended for good
    def terminate(self) -> None: ...    # cooperative stop
    def kill(self) -> None: ...
    def result(self) -> Any: ...


def _index(label: str) -> int:
    match = re.search(r"_(\d+)$", label)
    return int(match.group(1)) if match else -1


class ProgramRun:
    def __init__(self, program: Program, make_worker: Callable[[Node], Worker], *, launcher: str,
                 restartable_groups=("actor",), max_restarts: int = 3, grace_s: float = 5.0,
                 run_dir: str | None = None, on_close: Callable[[], None] | None = None) -> None:
        self.program, self.launcher, self.run_dir = program, launcher, run_dir
        self._make_worker, self._on_close = make_worker, on_close
        self._restartable = set(restartable_groups)
        self._max_restarts, self._grace_s = max_restarts, grace_s
        self.workers: dict[str, Worker] = {}
        self.states: dict[str, str] = {}
        self.restarts: dict[str, int] = {}
        self._restart_at: dict[str, float] = {}
        self._remove_by: dict[str, float] = {}
        self._lock = threading.RLock()
        self._done = threading.Event()
        self._control = None
        self.reason, self.failed = "", False
        self.start_time = time.monotonic()
        for node in program.nodes:
            self._start(node)
        self._thread = threading.Thread(target=self._supervise, name="supervisor", daemon=True)
        self._thread.start()

    def _start(self, node: Node) -> None:
        worker = self._make_worker(node)
        self.workers[node.label], self.states[node.label], self.restarts[node.label] = worker, "running", 0
        worker.start()

    # -- supervision --------------------------------------------------------------------------
    def _supervise(self) -> None:
        functions = [n.label for n in self.program.nodes if n.kind == "function"]
        while not self._done.is_set():
            with self._lock:
                ending = self._check(functions)
            if ending is not None:
                self._finish(*ending)
                return
            time.sleep(0.1)

    def _check(self, functions: list[str]) -> tuple[str, bool] | None:
        """Acts on what the workers did; returns ``(reason, failed)`` once the program ends."""
        now = time.monotonic()
        for label, worker in list(self.workers.items()):
            state = self.states[label]
            if state == "restarting" and now >= self._restart_at[label]:
                worker.start()
                state = self.states[label] = "running"
            if state not in ("running", "removing"):
                continue
            code = worker.poll()
            if code is None:
                if state == "removing" and now > self._remove_by[label]:
                    worker.kill()
                    self.states[label] = "removed"
                continue
            if state == "removing":
                self.states[label] = "removed"
                worker.kill()  # (an engine's worker may outlive its node: a Ray actor does)
            elif code == 0:
                self.states[label] = "done"
                if functions and all(self.states[f] == "done" for f in functions):
                    return f"{', '.join(functions)} finished", False
            elif (not worker.managed_restarts and worker.node.group in self._restartable
                  and self.restarts[label] < self._max_restarts):
                self.restarts[label] += 1
                backoff = 0.5 * 2 ** (self.restarts[label] - 1)
                print(f"[launcher] {label} exited with {code}; restart {self.restarts[label]}/"
                      f"{self._max_restarts} in {backoff:.1f}s", file=sys.stderr, flush=True)
                self.states[label], self._restart_at[label] = "restarting", now + backoff
            else:
                self.states[label] = f"failed ({code})"
                return f"{label} exited with code {code} (see {worker.log_path})", True
        return None

    def _finish(self, reason: str, failed: bool) -> None:
        with self._lock:
            if self._done.is_set():
                return
            self.reason, self.failed = reason, failed
            # After a failure, nodes may be blocked on the dead one and cannot stop by themselves:
            # a shorter grace (the checkpoints they would write are periodic anyway).
            self._stop_in_order(self._grace_s / 2.5 if failed else self._grace_s)
            for label, worker in self.workers.items():
                if worker.poll() is None:
                    worker.kill()
                    if self.states[label] in ("running", "restarting", "removing"):
                        self.states[label] = "killed"
                elif self.states[label] in ("running", "restarting"):
                    self.states[label] = "stopped"
            self.elapsed_s = time.monotonic() - self.start_time
            if self._control is not None:
                self._control.stop()
            if self._on_close is not None:
                self._on_close()
            self._done.set()

    def _stop_in_order(self, grace_s: float) -> None:
        """Asks nodes to stop, a node only once every node that uses it has ended (or its turn
        timed out): users before the services they use, so that a node stopping can still call
        them (e.g. the learner's last checkpoint of replay and counter), and nobody is left
        blocked on a server that already stopped. Each turn waits up to ``grace_s``, all of
        them together up to twice that (``grace_s`` of the program, or less after a failure)."""
        users: dict[str, set[str]] = {label: set() for label in self.workers}
        for label, worker in self.workers.items():
            for dep in worker.node.dependencies():
                users.setdefault(dep.label, set()).add(label)
        pending = {label for label, w in self.workers.items() if w.poll() is None}
        ended: set[str] = set(self.workers) - pending
        deadline = time.monotonic() + 2 * grace_s
        while pending and time.monotonic() < deadline:
            turn = {label for label in pending if users[label] <= ended} or set(pending)  # (a cycle: all)
            for label in turn:
                self.workers[label].terminate()
            until = min(deadline, time.monotonic() + grace_s)
            while any(self.workers[label].poll() is None for label in turn) and time.monotonic() < until:
                time.sleep(0.05)
            ended |= turn
            pending -= turn

    # -- elastic groups -----------------------------------------------------------------------
    def running(self, group: str) -> list[str]:
        """Labels of ``group``'s nodes that are running (or being restarted), in index order."""
        return sorted((label for label, w in self.workers.items() if w.node.group == group
                       and self.states[label] in ("running", "restarting")), key=_index)

    def add_nodes(self, group: str, count: int) -> list[str]:
        """Starts ``count`` new nodes of ``group`` (made by its ``add_group`` factory)."""
        with self._lock:
            if self._done.is_set():
                raise RuntimeError(f"program {self.program.name!r} has ended")
            labels = []
            for _ in range(count):
                node = self.program.new_node(group)
                self._start(node)
                labels.append(node.label)
        return labels

    def remove_nodes(self, group: str, count: int) -> list[str]:
        """Asks the ``count`` newest running nodes of ``group`` to stop (killed after the grace
        period); their exit is not a failure."""
        with self._lock:
            labels = self.running(group)[::-1][:count]
            for label in labels:
                self.states[label] = "removing"
                self._remove_by[label] = time.monotonic() + self._grace_s
                self.workers[label].terminate()
        return labels

    def scale(self, group: str, count: int) -> list[dict[str, Any]]:
        """Grows or shrinks ``group`` to ``count`` running nodes; returns the node table."""
        if count < 0:
            raise ValueError(f"cannot scale group {group!r} to {count} nodes")
        if group not in self.program.node_factories:
            raise ValueError(f"group {group!r} cannot be scaled (scalable: "
                             f"{sorted(self.program.node_factories) or 'none'})")
        change = count - len(self.running(group))
        if change > 0:
            self.add_nodes(group, change)
        elif change < 0:
            self.remove_nodes(group, -change)
        return self.status()

    def status(self) -> list[dict[str, Any]]:
        """One row per node: label, group, state, restarts, log."""
        with self._lock:
            return [{"label": label, "group": w.node.group, "state": self.states[label],
                     "restarts": w.restarts if w.managed_restarts else self.restarts[label],
                     "log": w.log_path} for label, w in self.workers.items()]

    def serve_control(self, directory: str) -> str:
        """Serves ``scale`` and ``status`` on loopback RPC; writes ``control.json`` (address)
        and ``control.token`` (mode 0600) to ``directory``. Returns the address."""
        from shoal.launch.programs.rpc import RpcServer

        token = secrets.token_urlsafe(32)
        self._control = RpcServer(_Control(self), host="127.0.0.1", token=token).start()
        os.makedirs(directory, exist_ok=True)
        token_path = os.path.join(directory, "control.token")
        fd = os.open(token_path + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(token)
        os.replace(token_path + ".tmp", token_path)
        with open(os.path.join(directory, "control.json"), "w") as f:
            json.dump({"address": self._control.address, "program": self.program.name,
                       "pid": os.getpid()}, f)
        return self._control.address

    # -- ending -------------------------------------------------------------------------------
    def stop(self, reason: str = "stopped by the user") -> None:
        self._finish(reason, failed=False)

    def wait(self, timeout_s: float | None = None) -> dict[str, Any]:
        """Blocks until the program ends; returns ``{label: result}`` of its function nodes.

        Raises ``ProgramFailed`` if a node failed, ``TimeoutError`` after ``timeout_s``.
        """
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        try:
            while not self._done.wait(0.2):
                if deadline is not None and time.monotonic() > deadline:
                    self.stop(f"timed out after {timeout_s}s")
                    raise TimeoutError(f"program {self.program.name!r} did not end within {timeout_s}s")
        except KeyboardInterrupt:
            self.stop("interrupted (Ctrl-C)")
            raise
        if self.failed:
            raise ProgramFailed(f"program {self.program.name!r} failed: {self.reason}")
        return {n.label: self.workers[n.label].result() for n in self.program.nodes if n.kind == "function"}

    def summary(self) -> str:
        rows = [f"program {self.program.name!r} {'FAILED' if self.failed else 'ended'}: {self.reason} "
                f"({getattr(self, 'elapsed_s', time.monotonic() - self.start_time):.1f}s, {self.launcher})",
                f"  {'node':<14} {'group':<10} {'state':<12} {'restarts':>8}  log"]
        for row in self.status():
            rows.append(f"  {row['label']:<14} {row['group']:<10} {row['state']:<12} "
                        f"{row['restarts']:>8}  {row['log']}")
        return "\n".join(rows)


class _Control:
    """What ``shoal scale`` may call on a running program (nothing else is exposed)."""

    def __init__(self, run: ProgramRun) -> None:
        self._run = run

    def scale(self, group: str, count: int) -> list[dict[str, Any]]:
        return self._run.scale(group, int(count))

    def status(self) -> list[dict[str, Any]]:
        return self._run.status()


def connect_control(directory: str, timeout_s: float = 10.0):
    """An RPC client to the control service of the program running with ``directory`` as its
    run directory (``ProgramRun.serve_control``)."""
    from shoal.launch.programs.rpc import RpcClient

    try:
        with open(os.path.join(directory, "control.json")) as f:
            address = json.load(f)["address"]
        with open(os.path.join(directory, "control.token")) as f:
            token = f.read().strip()
    except FileNotFoundError:
        raise ValueError(f"{directory!r} is not the run directory of a running distributed program "
                         "(no control.json / control.token in it)") from None
    try:
        return RpcClient(address, token=token, timeout_s=timeout_s).wait_for_ready(timeout_s)
    except TimeoutError:
        raise ValueError(f"the program of {directory!r} does not answer at {address} (has it ended?)") from None
