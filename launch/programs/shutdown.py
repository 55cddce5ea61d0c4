"""Stopping a program's nodes in dependency order.

A node is asked to stop only once every node that uses it has ended (or its turn timed out):
users before the services they use, so that a node stopping can still call them, and nobody
is left blocked on a server that already stopped. Each turn waits up to ``grace_s``, all turns
together up to twice that; what is still running then is the caller's to kill. A ``hurry``
event, once set, ends the waiting at once (a second Ctrl-C: kill now).
"""

from __future__ import annotations

import threading
import time
from typing import Mapping


def stop_in_order(workers: Mapping[str, "Worker"], grace_s: float,  # noqa: F821
                  hurry: threading.Event | None = None) -> None:
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
