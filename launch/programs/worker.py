"""Entry point of one node's process (started by the ``processes`` launcher).

    python -m shoal.launch.programs.worker <label> <addresses dir> <launcher pid> <result fd>

The node's definition (cloudpickle) comes on stdin, written by the launcher that started this
process from its own memory: no file that another process could replace is loaded, and nothing
here reads bytes from a socket. The group's environment
variables are already set (by the launcher), so JAX/XLA see them before their first import;
``SHOAL_TOKEN``, ``SHOAL_BIND_HOST``, ``SHOAL_ADVERTISE_HOST`` and ``SHOAL_PORTS`` come the same way (never on
the command line). The process dies with its launcher (PR_SET_PDEATHSIG, plus a parent-pid
watchdog), turns SIGTERM into a cooperative stop once its node is ready (before that SIGTERM
ends it at once: it has nothing to save yet), and writes its node's result as JSON to the
pipe ``<result fd>`` -- or, when the node raised, ``{"failure": line, "restart": bool}``: the
exception in one line (``failure_line``), which the launcher's message about the failed node
quotes, and whether a restart could help (``False`` where the exception's ``restart`` says so:
e.g. a node whose env is not the run's).
"""

from __future__ import annotations

import ctypes
import io
import json
import os
import signal
import sys
import threading
import time
import traceback

import cloudpickle

from shoal.core.environment_variables import value
from shoal.launch.programs.addressing import FileAddressBook
from shoal.launch.programs.nodes import NodeContext, set_context

# (failure_line lives in stopping.py: nothing in the package imports this module, which runs as
# ``python -m``; imported first by its package, runpy would warn at the top of every node's log)
from shoal.launch.programs.stopping import failure_line


def _die_with_parent(parent_pid: int) -> None:
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass

    def watchdog() -> None:
        while os.getppid() == parent_pid:
            time.sleep(0.5)
        os._exit(1)

    if os.getppid() != parent_pid:
        os._exit(1)
    threading.Thread(target=watchdog, daemon=True).start()


def main(label: str, addresses_dir: str, parent_pid: str, result_fd: str) -> int:
    _die_with_parent(int(parent_pid))

    node = cloudpickle.load(sys.stdin.buffer)  # (the launcher's pipe; see the module doc)
    if node.label != label:
        raise SystemExit(f"worker: the definition on stdin is node {node.label!r}, not {label!r}")
    ctx = NodeContext(
        label=node.label,
        group=node.group,
        address_book=FileAddressBook(addresses_dir),
        token=value("SHOAL_TOKEN"),
        bind_host=value("SHOAL_BIND_HOST"),
        advertise_host=value("SHOAL_ADVERTISE_HOST"),
        start_count=value("SHOAL_NODE_START"),
        ports=value("SHOAL_PORTS"),
    )
    set_context(ctx, process_wide=True)
    # SIGTERM keeps its default action (the process ends at once, even inside a compiler) until
    # the node is ready: before that it has nothing to save. From then on it asks for a stop.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)

    def stop_on_sigterm() -> None:
        signal.signal(signal.SIGTERM, lambda *_: ctx.stop_event.set())

    ctx.on_ready = stop_on_sigterm
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the launcher's to handle
    print(f"[{node.label}] started (pid {os.getpid()}, group {node.group})", flush=True)
    try:
        result = node.run(ctx)
    except BaseException as e:  # noqa: BLE001 -- logged; the exit code tells the launcher, the pipe why
        traceback.print_exc()
        try:
            with os.fdopen(int(result_fd), "w") as pipe:
                json.dump({"failure": failure_line(e), "restart": bool(getattr(e, "restart", True))}, pipe)
        except (OSError, ValueError):
            pass
        return 1
    with os.fdopen(int(result_fd), "w") as pipe:
        json.dump(result, pipe, default=str)
    print(f"[{node.label}] finished", flush=True)
    return 0


if __name__ == "__main__":
    if isinstance(sys.stdout, io.TextIOWrapper):  # (it is, unless something replaced it)
        sys.stdout.reconfigure(line_buffering=True)
    code = main(*sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # do not wait on non-daemon threads (gRPC, Reverb) at exit
