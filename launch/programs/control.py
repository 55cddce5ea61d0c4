"""The control service of a running program: ``scale`` and ``status`` for ``shoal scale`` /
``shoal status``, on loopback RPC, with a token of its own.

``serve_control(run, directory, limits)`` writes ``control.json`` (address, program, pid) and
``control.token`` (mode 0600) into ``directory``, and removes them when the program ends;
``connect_control(directory)`` reads them back, with one clear error for a directory that holds
no running program (or unreadable or damaged files): at once where the program ended (its files
are gone, or the process that wrote them is), not after the connection's timeout.
"""

from __future__ import annotations

import json
import os
import secrets
from typing import Any

from shoal.core.files import json_text, make_dirs, write_atomic
from shoal.launch.programs.rpc import RpcClient, RpcServer


class _Control:
    """What ``shoal scale`` may call on a running program (nothing else is exposed)."""

    def __init__(self, run: Any, limits: dict[str, tuple[int, int]], autoscale: Any = None) -> None:
        self._run, self._limits, self._autoscale = run, limits, autoscale

    def scale(self, group: str, count: int) -> list[dict[str, Any]]:
        rows = self._run.scale(group, count, self._limits.get(group, (0, 1_000_000)))
        if self._autoscale is not None and group == "actor":  # (a count set by hand stands)
            self._autoscale.pinned = count
        return rows

    def status(self) -> list[dict[str, Any]]:
        return self._run.status()

    def autoscale(self) -> dict[str, Any] | None:
        """The autoscaler's mode, target and why (``None``: a fixed count of actors)."""
        return self._autoscale.status() if self._autoscale is not None else None


def serve_control(run: Any, directory: str, limits: dict[str, tuple[int, int]] | None = None, autoscale: Any = None):
    """Starts the control server of ``run`` (stopped when the program ends); ``limits``:
    ``{group: (fewest, most)}`` nodes ``scale`` may run; ``autoscale``: the run's autoscale
    loop (its ``status()``, and ``pinned`` set by a manual ``scale`` of the actors)."""
    token = secrets.token_urlsafe(32)
    server = RpcServer(_Control(run, limits or {}, autoscale), host="127.0.0.1", token=token).start()
    run.closers.append(server.stop)
    make_dirs(directory)
    # (mode 0600 from the first byte; never written through a link planted in the directory)
    write_atomic(os.path.join(directory, "control.token"), token, mode=0o600)
    write_atomic(
        os.path.join(directory, "control.json"),
        json_text({"address": server.address, "program": run.program.name, "pid": os.getpid()}),
    )
    run.closers.append(lambda: _remove(directory, server.address))
    return server


def _remove(directory: str, address: str) -> None:
    """Removes the control files of the server at ``address`` (not those of a later program)."""
    try:
        with open(os.path.join(directory, "control.json")) as f:
            if json.load(f).get("address") != address:
                return
        for name in ("control.json", "control.token"):
            os.unlink(os.path.join(directory, name))
    except (OSError, ValueError, AttributeError):  # (gone already, or not ours)
        pass


def _alive(pid: Any) -> bool:
    """Whether process ``pid`` runs (``True`` where it cannot be told)."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # (another user's: it runs)
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"  # (a zombie: ended, not yet reaped)
    except (OSError, IndexError):
        return True


def _read(path: str, what: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        raise ValueError(
            f"{os.path.dirname(path)!r} is not the run directory of a running distributed "
            f"program (no {os.path.basename(path)} in it)"
        ) from None
    except OSError as e:
        raise ValueError(f"cannot read {path} ({what}): {e.strerror or e}") from None


def connect_control(directory: str, timeout_s: float = 10.0):
    """An RPC client to the control service of the program running in ``directory``."""
    text = _read(os.path.join(directory, "control.json"), "the program's control address")
    try:
        written = json.loads(text)
        address = written["address"]
        if not isinstance(address, str):
            raise TypeError(address)
    except (ValueError, KeyError, TypeError):
        raise ValueError(
            f"{os.path.join(directory, 'control.json')} is damaged (not the JSON a running "
            "program writes); is the program still running?"
        ) from None
    if not _alive(written.get("pid")):
        raise ValueError(f"the program of {directory!r} has ended (its process, pid {written['pid']}, is gone)")
    token = _read(os.path.join(directory, "control.token"), "the control token").strip()
    try:
        return RpcClient(address, token=token, timeout_s=timeout_s).wait_for_ready(timeout_s)
    except TimeoutError:
        raise ValueError(f"the program of {directory!r} does not answer at {address} (has it ended?)") from None
