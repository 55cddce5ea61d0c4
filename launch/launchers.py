"""Launchers: start a program's nodes as threads or processes, and supervise them.

``launch(program, launcher="processes")`` returns a ``ProgramRun``; ``run.wait()`` blocks until
the program ends and returns the function nodes' results; ``run.stop()`` ends it. Supervision:

* a node of a restartable group (default: ``actor``) that crashes is restarted, at most
  ``max_restarts`` times, after a backoff of ``0.5 * 2**k`` seconds;
* the program completes when all its function nodes have returned (e.g. the evaluator that
  stops at the step budget), and fails when any other node dies;
* stopping sends SIGTERM (a cooperative stop: ``should_stop()`` turns true), then SIGKILL after
  ``grace_s``. Each node process runs in its own session, dies with the launcher, and logs to
  ``<run_dir>/logs/<label>.log``. Ctrl-C in ``wait()`` stops every node before re-raising.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from typing import Any, Mapping

from shoal.launch.nodes import AddressRegistry, NodeContext, set_context
from shoal.launch.program import Node, Program

LAUNCHERS = ("processes", "inprocess")


class ProgramFailed(RuntimeError):
    pass


class _ProcessWorker:
    def __init__(self, node: Node, run_dir: str, env: Mapping[str, str]) -> None:
        self.node, self.run_dir, self.env = node, run_dir, dict(env)
        self.log_path = os.path.join(run_dir, "logs", f"{node.label}.log")
        self.node_file = os.path.join(run_dir, "nodes", f"{node.label}.pkl")
        import cloudpickle

        with open(self.node_file, "wb") as f:
            cloudpickle.dump(node, f)
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        log = open(self.log_path, "a")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "shoal.launch.worker", self.node_file,
             os.path.join(self.run_dir, "addresses"), self.run_dir, str(os.getpid())],
            env=self.env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True)
        log.close()

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def poll(self) -> int | None:
        return self.proc.poll() if self.proc else None

    def _signal(self, sig: int) -> None:
        if self.proc and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                pass

    def terminate(self) -> None:
        self._signal(signal.SIGTERM)

    def kill(self) -> None:
        self._signal(signal.SIGKILL)
        if self.proc:
            self.proc.wait(5)

    def result(self) -> Any:
        path = os.path.join(self.run_dir, "results", f"{self.node.label}.json")
        if os.path.exists(path):
            with open(path) as f:
                return json.load(f)
        return None


class _ThreadWorker:
    def __init__(self, node: Node, run_dir: str, token: str | None, host: str) -> None:
        self.node, self.run_dir, self.token, self.host = node, run_dir, token, host
        self.log_path = "(this process)"
        self.thread: threading.Thread | None = None
        self.code: int | None = None
        self._result: Any = None
        self.ctx: NodeContext | None = None

    def start(self) -> None:
        self.code = None
        self.ctx = NodeContext(self.node.label, self.node.group,
                               AddressRegistry(os.path.join(self.run_dir, "addresses")),
                               self.run_dir, self.token, self.host)
        self.thread = threading.Thread(target=self._main, name=self.node.label, daemon=True)
        self.thread.start()

    def _main(self) -> None:
        set_context(self.ctx)
        try:
            self._result = self.node.run(self.ctx)
            self.code = 0
        except BaseException:  # noqa: BLE001
            print(f"[{self.node.label}] failed:\n{traceback.format_exc()}", file=sys.stderr)
            self.code = 1

    pid = None

    def poll(self) -> int | None:
        return None if self.thread is None or self.thread.is_alive() else self.code

    def terminate(self) -> None:
        if self.ctx:
            self.ctx.stop_event.set()

    def kill(self) -> None:  # threads cannot be killed; they are daemons and die with the process
        pass

    def result(self) -> Any:
        return self._result


class ProgramRun:
    def __init__(self, program: Program, workers: dict[str, Any], *, restartable_groups,
                 max_restarts: int, grace_s: float, run_dir: str) -> None:
        self.program, self.workers, self.run_dir = program, workers, run_dir
        self._restartable = set(restartable_groups)
        self._max_restarts, self._grace_s = max_restarts, grace_s
        self.restarts = {label: 0 for label in workers}
        self.states = {label: "running" for label in workers}
        self._restart_at: dict[str, float] = {}
        self._lock = threading.Lock()
        self._done = threading.Event()
        self.reason, self.failed = "", False
        self.start_time = time.monotonic()
        for worker in workers.values():
            worker.start()
        self._thread = threading.Thread(target=self._supervise, name="supervisor", daemon=True)
        self._thread.start()

    def _supervise(self) -> None:
        functions = [n.label for n in self.program.nodes if n.kind == "function"]
        while not self._done.is_set():
            now = time.monotonic()
            for label, worker in self.workers.items():
                if self.states[label] == "restarting" and now >= self._restart_at[label]:
                    worker.start()
                    self.states[label] = "running"
                if self.states[label] != "running":
                    continue
                code = worker.poll()
                if code is None:
                    continue
                node = worker.node
                if code == 0:
                    self.states[label] = "done"
                    if functions and all(self.states[f] == "done" for f in functions):
                        self._finish(f"{', '.join(functions)} finished", failed=False)
                elif node.group in self._restartable and self.restarts[label] < self._max_restarts:
                    self.restarts[label] += 1
                    backoff = 0.5 * 2 ** (self.restarts[label] - 1)
                    print(f"[launcher] {label} exited with {code}; restart {self.restarts[label]}/"
                          f"{self._max_restarts} in {backoff:.1f}s", file=sys.stderr, flush=True)
                    self.states[label] = "restarting"
                    self._restart_at[label] = now + backoff
                else:
                    self.states[label] = f"failed ({code})"
                    self._finish(f"{label} exited with code {code} (see {worker.log_path})", failed=True)
                    return
            time.sleep(0.1)

    def _finish(self, reason: str, failed: bool) -> None:
        with self._lock:
            if self._done.is_set():
                return
            self.reason, self.failed = reason, failed
            # Consumers first (nodes no other node holds a handle to), then the services they
            # use, so that nobody is left blocked on a call to a server that already stopped.
            used = {dep for node in self.program.nodes for dep in node.dependencies()}
            consumers = [w for w in self.workers.values() if w.node not in used]
            providers = [w for w in self.workers.values() if w.node in used]
            deadline = time.monotonic() + self._grace_s
            for phase, until in ((consumers, time.monotonic() + self._grace_s / 2), (providers, deadline)):
                live = [w for w in phase if w.poll() is None]
                for worker in live:
                    worker.terminate()
                while any(w.poll() is None for w in live) and time.monotonic() < until:
                    time.sleep(0.05)
            for label, worker in self.workers.items():
                if worker.poll() is None:
                    worker.kill()
                    self.states[label] = "killed"
                elif self.states[label] in ("running", "restarting"):
                    self.states[label] = "stopped"
            self.elapsed_s = time.monotonic() - self.start_time
            self._done.set()

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
                f"({getattr(self, 'elapsed_s', time.monotonic() - self.start_time):.1f}s)",
                f"  {'node':<14} {'group':<10} {'state':<12} {'restarts':>8}  log"]
        for label, worker in self.workers.items():
            rows.append(f"  {label:<14} {worker.node.group:<10} {self.states[label]:<12} "
                        f"{self.restarts[label]:>8}  {worker.log_path}")
        return "\n".join(rows)


def launch(program: Program, launcher: str = "processes", *, run_dir: str | None = None,
           token: str | None = None, host: str = "127.0.0.1",
           group_env: Mapping[str, Mapping[str, str]] | None = None,
           restartable_groups=("actor",), max_restarts: int = 3, grace_s: float = 5.0) -> ProgramRun:
    """Starts every node of ``program`` (see the module docstring).

    Args:
      launcher: ``"processes"`` (one OS process per node) or ``"inprocess"`` (one thread each,
        for debugging; ``group_env`` cannot apply there).
      run_dir: holds ``logs/``, ``addresses/``, ``results/`` (default: a new temp dir).
      token: a shared secret every RPC must carry (default: none).
      host: the interface RPC servers bind; 127.0.0.1 unless you opt in to another.
      group_env: extra environment variables per group, e.g. ``{"actor": {"CUDA_VISIBLE_DEVICES": ""}}``.
    """
    if launcher not in LAUNCHERS:
        raise ValueError(f"unknown launcher {launcher!r}; choose one of {', '.join(LAUNCHERS)}")
    if not program.nodes:
        raise ValueError(f"program {program.name!r} has no nodes")
    run_dir = run_dir or tempfile.mkdtemp(prefix=f"shoal-{program.name}-")
    for sub in ("logs", "addresses", "results", "nodes"):
        os.makedirs(os.path.join(run_dir, sub), exist_ok=True)
    for name in os.listdir(os.path.join(run_dir, "addresses")):  # stale addresses of an earlier run
        os.remove(os.path.join(run_dir, "addresses", name))
    group_env = group_env or {}
    unknown = set(group_env) - set(program.groups)
    if unknown:
        raise ValueError(f"group_env names groups {sorted(unknown)} that program {program.name!r} "
                         f"does not have (groups: {sorted(program.groups)})")
    if launcher == "processes":
        base = dict(os.environ, SHOAL_TOKEN=token or "", SHOAL_HOST=host, PYTHONUNBUFFERED="1")
        workers = {n.label: _ProcessWorker(n, run_dir, {**base, **group_env.get(n.group, {})})
                   for n in program.nodes}
    else:
        workers = {n.label: _ThreadWorker(n, run_dir, token, host) for n in program.nodes}
    return ProgramRun(program, workers, restartable_groups=restartable_groups,
                      max_restarts=max_restarts, grace_s=grace_s, run_dir=run_dir)
