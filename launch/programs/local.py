"""Local launchers: every node a thread of this process (``inprocess``), or an OS process of
this machine (``processes``), supervised by a ``ProgramRun``.

Node processes run ``python -m shoal.launch.programs.worker`` in their own session, read their
node's definition from their stdin (from this process's memory), die with the launcher, log to
``<run_dir>/logs/<label>.log``, find each other through a ``FileAddressBook`` in
``<run_dir>/addresses``, and send their node's result back through a pipe. Stopping a node
sends SIGTERM (a cooperative stop: ``should_stop()`` turns true), then SIGKILL.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import traceback
from collections.abc import Mapping
from typing import Any

import cloudpickle

from shoal.core.files import open_append
from shoal.launch.programs.addressing import FileAddressBook
from shoal.launch.programs.nodes import NodeContext, set_context
from shoal.launch.programs.program import Node
from shoal.launch.programs.stopping import failure_line


class ThreadWorker:
    managed_restarts, restarts = False, 0

    def __init__(
        self,
        node: Node,
        book: FileAddressBook,
        token: str | None,
        bind_host: str,
        advertise_host: str,
        ports: tuple[int, int] | None = None,
    ) -> None:
        self.node, self._book, self._token, self._ports = node, book, token, ports
        self._hosts = bind_host, advertise_host
        self.log_path = "(this process)"
        self.thread: threading.Thread | None = None
        self.code: int | None = None
        self._result: Any = None
        self.ctx: NodeContext | None = None
        self._starts = 0
        self.failure: str | None = None  # why it failed, in one line
        self.final = False  # whether it failed in a way no restart mends (the exception's ``restart``)

    def start(self) -> None:
        self.code, self._starts = None, self._starts + 1
        self.ctx = NodeContext(
            self.node.label,
            self.node.group,
            self._book,
            self._token,
            *self._hosts,
            start_count=self._starts,
            ports=self._ports,
        )
        self.thread = threading.Thread(target=self._main, args=(self.ctx,), name=self.node.label, daemon=True)
        self.thread.start()

    def _main(self, ctx: NodeContext) -> None:
        set_context(ctx)
        try:
            self._result = self.node.run(ctx)
            self.code = 0
        except BaseException as e:  # noqa: BLE001
            print(f"[{self.node.label}] failed:\n{traceback.format_exc()}", file=sys.stderr)
            self.failure, self.final, self.code = failure_line(e), not getattr(e, "restart", True), 1

    def poll(self) -> int | None:
        return None if self.thread is None or self.thread.is_alive() else self.code

    def terminate(self) -> None:
        if self.ctx:
            self.ctx.stop_event.set()

    def kill(self) -> None:  # threads cannot be killed; they are daemons and die with the process
        pass

    def result(self) -> Any:
        return self._result

    def pid(self) -> int | None:
        return None  # (a thread of this process)


class ProcessWorker:
    """One node as an OS process. The node's definition (cloudpickle) stays in this process's
    memory and is handed to every start of the node through its stdin: nothing on disk that
    another process could swap between a start and a restart is ever loaded."""

    managed_restarts, restarts = False, 0

    def __init__(self, node: Node, run_dir: str, env: Mapping[str, str]) -> None:
        self.node, self.run_dir, self.env = node, run_dir, dict(env)
        self.log_path = os.path.join(run_dir, "logs", f"{node.label}.log")
        self._definition = cloudpickle.dumps(node)
        self.proc: subprocess.Popen | None = None
        self._result_bytes = b""
        self._starts = 0
        self.pids: list[int] = []  # of every process this node ran in

    def start(self) -> None:
        read_end, write_end = os.pipe()
        self._starts += 1
        with open_append(self.log_path) as log:  # (never through a link planted in logs/)
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "shoal.launch.programs.worker",
                    self.node.label,
                    os.path.join(self.run_dir, "addresses"),
                    str(os.getpid()),
                    str(write_end),
                ],
                env={**self.env, "SHOAL_NODE_START": str(self._starts)},
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.PIPE,
                start_new_session=True,
                pass_fds=(write_end,),
            )
        self.pids.append(self.proc.pid)
        os.close(write_end)
        threading.Thread(target=self._hand_over, args=(self.proc,), daemon=True).start()
        self._reader = threading.Thread(target=self._read_result, args=(read_end,), daemon=True)
        self._reader.start()

    def _hand_over(self, proc: subprocess.Popen) -> None:
        """Writes the node's definition to the process's stdin (a thread: a large definition
        fills the pipe until the child reads it)."""
        if proc.stdin is None:  # (never: it is started with stdin=PIPE)
            return
        try:
            proc.stdin.write(self._definition)
            proc.stdin.close()
        except OSError:  # it died before reading: its exit code tells the supervisor
            pass

    def _read_result(self, fd: int) -> None:
        chunks = []
        with os.fdopen(fd, "rb") as pipe:  # until the node process exits
            while chunk := pipe.read(65536):
                chunks.append(chunk)
        self._result_bytes = b"".join(chunks)

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

    def kill(self, wait_s: float = 30.0) -> None:
        """SIGKILL to the node's process group; waits up to ``wait_s`` for the process to exit
        (on a machine under load, a big process takes seconds to release its memory), then
        goes on without raising: it is dead or dying, and whoever stops the program must go on."""
        self._signal(signal.SIGKILL)
        if self.proc:
            try:
                self.proc.wait(wait_s)
            except subprocess.TimeoutExpired:
                print(
                    f"shoal: warning: node {self.node.label} (pid {self.proc.pid}) was killed but had not "
                    f"exited after {wait_s:g}s",
                    file=sys.stderr,
                    flush=True,
                )

    def _written(self, wait_s: float = 10.0) -> Any:
        self._reader.join(wait_s)  # the pipe's last bytes may still be in flight after the exit
        if self._reader.is_alive():  # (a child of the node's holds the pipe open)
            return None
        try:
            return json.loads(self._result_bytes) if self._result_bytes else None
        except ValueError:  # (cut short)
            return None

    def result(self) -> Any:
        written = self._written()
        return None if self.proc is not None and self.proc.returncode else written

    @property
    def failure(self) -> str | None:
        """Why the node's process failed, in one line (its exception), if it said."""
        if self.proc is None or not self.proc.returncode:
            return None
        written = self._written(wait_s=1.0)
        return written.get("failure") if isinstance(written, dict) and isinstance(written.get("failure"), str) else None

    @property
    def final(self) -> bool:
        """Whether the node's process failed in a way no restart mends (it said so)."""
        if self.proc is None or not self.proc.returncode:
            return False
        written = self._written(wait_s=1.0)
        return isinstance(written, dict) and written.get("restart") is False
