"""How a launched program ends: ``ProgramEnding``, mixed into ``ProgramRun`` (it uses the run's
workers, states, lock and events), and ``ProgramFailed``.

When the program ends (completed, failed, or ``stop()``), a ``before_stop(run)`` hook runs while
every node that still runs is up (after a failure too: ``run.failed`` says so, and the hook
checks what it needs, e.g. a final checkpoint of the nodes still alive); then nodes are asked to
stop in dependency order (``stop_in_order``) and what is left is killed.
``hurry()`` (e.g. a second Ctrl-C) cuts that short: the hook is no longer waited for, and every
node is killed at once; the states, the closers (shared-memory sweeps) and the summary are as
after any other end. ``wait()`` returns the results of the nodes that end the program;
``results()`` every node's that returned.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from shoal.launch.programs.program import Program
from shoal.launch.programs.states import NodeState, Worker


class ProgramFailed(RuntimeError):
    pass


FAILURE_CHARS = 1000  # (a NaN loss's line holds the update and its batch's statistics)


def failure_line(error: BaseException, chars: int = FAILURE_CHARS) -> str:
    """``Type: first line of the message``, at most ``chars`` characters (a failed node's line,
    written by its worker process and quoted by the launcher)."""
    first = (str(error).strip().splitlines() or [""])[0]
    return f"{type(error).__name__}: {first}"[:chars] if first else type(error).__name__


class ProgramEnding:
    # What it uses of the ``ProgramRun`` it is mixed into (set there).
    program: Program
    workers: dict[str, Worker]
    states: dict[str, NodeState]
    closers: list[Callable[[], None]]
    reason: str
    failed: bool
    stop_error: Exception | None
    start_time: float
    elapsed_s: float  # (set when it has ended)
    _lock: threading.RLock
    _done: threading.Event
    _hurry: threading.Event
    _finishing: bool
    _grace_s: float
    _before_stop: Callable[[Any], None] | None

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def ending(self, within_s: float = 0.0) -> bool:
        """Whether the program is ending (completed, failed or stopped), waiting up to
        ``within_s`` for it: e.g. after a call to a node failed, until the supervisor saw why."""
        deadline = time.monotonic() + within_s
        while not self._finishing and time.monotonic() < deadline:
            time.sleep(0.05)
        return self._finishing

    def stop(self, reason: str = "stopped by the user") -> None:
        self._finish(reason, failed=False)

    def hurry(self) -> None:
        """Ends a stop under way now: no more waiting for the ``before_stop`` hook or for nodes
        to stop by themselves; what still runs is killed (from any thread)."""
        self._hurry.set()

    def wait(self, timeout_s: float | None = None) -> dict[str, Any]:
        """Blocks until the program ends; returns ``{label: result}`` of the nodes that end it.

        Raises ``ProgramFailed`` if a node failed, ``TimeoutError`` after ``timeout_s``, and
        what the ``before_stop`` hook raised.
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
        if self.stop_error is not None:
            raise self.stop_error
        return {n.label: self.workers[n.label].result() for n in self.program.nodes if n.ends_program}

    def results(self) -> dict[str, Any]:
        """``{label: result}`` of every node whose last run returned (exit code 0)."""
        return {label: worker.result() for label, worker in self.workers.items() if worker.poll() == 0}

    def _finish(self, reason: str, failed: bool) -> None:
        with self._lock:
            if self._finishing:
                return
            self._finishing = True
            self.reason, self.failed = reason, failed
        if self._before_stop is not None and not self._hurry.is_set():
            # every node is still up (e.g. a final checkpoint); not under the lock (it may use the
            # run), and in a thread of its own, so that hurry() need not wait for it
            hook = threading.Thread(target=self._run_before_stop, name="before-stop", daemon=True)
            hook.start()
            while hook.is_alive() and not self._hurry.wait(0.02):
                pass
        with self._lock:
            # After a failure, nodes may be blocked on the dead one and cannot stop by themselves:
            # a shorter grace (the checkpoints they would write are periodic anyway).
            stop_in_order(
                {label: w for label, w in self.workers.items() if self.states[label] != NodeState.REMOVED},
                self._grace_s / 2.5 if failed else self._grace_s,
                self._hurry,
            )
            for label, worker in self.workers.items():
                if worker.poll() is None:
                    worker.kill()
                    if self.states[label] in (NodeState.RUNNING, NodeState.RESTARTING, NodeState.REMOVING):
                        self.states[label] = NodeState.KILLED  # (a pending one stays pending: it never ran)
                elif self.states[label] in (NodeState.RUNNING, NodeState.RESTARTING):
                    self.states[label] = NodeState.STOPPED
            self.elapsed_s = time.monotonic() - self.start_time
            for close in reversed(self.closers):
                close()
            self._done.set()

    def _run_before_stop(self) -> None:
        hook = self._before_stop  # (set: _finish starts this only for a hook)
        try:
            if hook is not None:
                hook(self)
        except Exception as e:  # noqa: BLE001 -- raised from wait(), once the program stopped
            if not self._hurry.is_set():  # (a hook cut short by hurry() fails as its nodes die)
                self.stop_error = e


def stop_in_order(workers: Mapping[str, Worker], grace_s: float, hurry: threading.Event | None = None) -> None:
    """Stops a program's nodes (``workers``) in dependency order.

    A node is asked to stop only once every node that uses it has ended (or its turn timed out):
    users before the services they use, so that a node stopping can still call them, and nobody
    is left blocked on a server that already stopped. Each turn waits up to ``grace_s``, all turns
    together up to twice that. A user whose turn timed out (e.g. an actor whose last write waits
    on the rate limiter of a learner that a busy machine slows down) is released when its
    services stop (its call fails: replay's tables closed) and ends by itself. So after the
    turns (those the deadline cut short are asked to stop together), what still runs is waited
    for up to ``grace_s`` more; what runs then is the caller's to kill.
    A ``hurry`` event, once set, ends the waiting at once (a second Ctrl-C: kill now).
    """
    users: dict[str, set[str]] = {label: set() for label in workers}
    for label, worker in workers.items():
        for dep in worker.node.dependencies():
            users.setdefault(dep.label, set()).add(label)
    pending = {label for label, w in workers.items() if w.poll() is None}
    ended: set[str] = set(workers) - pending
    deadline = time.monotonic() + 2 * grace_s
    hurry = hurry or threading.Event()
    while pending and time.monotonic() < deadline and not hurry.is_set():
        turn = {label for label in pending if users[label] <= ended} or set(pending)  # (a cycle: all)
        for label in turn:
            workers[label].terminate()
        until = min(deadline, time.monotonic() + grace_s)
        while any(workers[label].poll() is None for label in turn) and time.monotonic() < until:
            if hurry.wait(0.02):
                return
        ended |= turn
        pending -= turn
    if hurry.is_set():
        return
    for label in pending:  # (turns cut short by the deadline: the rest is asked together)
        workers[label].terminate()
    until = time.monotonic() + grace_s  # (users released by their services' stop end now)
    while any(w.poll() is None for w in workers.values()) and time.monotonic() < until:
        if hurry.wait(0.02):
            return
