"""Elastic groups: a running program grows and shrinks a group made with ``Program.add_group``.

``add_nodes`` starts new nodes from the group's factory; ``remove_nodes`` asks the newest
running ones to stop (like at the end of a program; killed after ``REMOVE_GRACE_S``) and their
exit is not a failure: they show as ``removed``. ``scale(group, count)`` does either, within the
bounds the caller allows. ``status`` / ``summary`` give the node table. Mixed into
``ProgramRun`` (it uses the run's workers, states and lock).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from typing import Any

from shoal.launch.programs.program import Node, Program
from shoal.launch.programs.states import LIVE, NodeState, Worker

# How long a node asked to stop by a scale-down has to finish before it is killed: longer than a
# program's stop (nothing waits on it), so that an actor held by the rate limiter in an insert
# (the learner is slow: often why it is scaled down) finishes it, reports its last steps and
# returns its summary (its figures in the run's result) rather than being killed.
REMOVE_GRACE_S = 30.0


def _index(label: str) -> int:
    match = re.search(r"_(\d+)$", label)
    return int(match.group(1)) if match else -1


class ElasticGroups:
    # What it uses of the ``ProgramRun`` it is mixed into (set and defined there).
    program: Program
    launcher: str
    workers: dict[str, Worker]
    states: dict[str, NodeState]
    exit_codes: dict[str, int]
    restarts: dict[str, int]
    reason: str
    failed: bool
    start_time: float
    _lock: threading.RLock
    _finishing: bool
    _grace_s: float
    _remove_by: dict[str, float]
    _start: Callable[[Node], None]

    def running(self, group: str, placed: bool = False) -> list[str]:
        """Labels of ``group``'s nodes that are running (or being restarted, or waiting to be
        placed unless ``placed``), in index order."""
        return sorted(
            (
                label
                for label, w in self.workers.items()
                if w.node.group == group
                and self.states[label] in LIVE
                and not (placed and self.states[label] == NodeState.PENDING)
            ),
            key=_index,
        )

    def add_nodes(self, group: str, count: int) -> list[str]:
        """Starts ``count`` new nodes of ``group`` (made by its ``add_group`` factory)."""
        with self._lock:
            if self._finishing:
                raise RuntimeError(f"program {self.program.name!r} has ended")
            labels = []
            for _ in range(count):
                node = self.program.new_node(group)
                self._start(node)
                labels.append(node.label)
        return labels

    def remove_nodes(self, group: str, count: int) -> list[str]:
        """Asks the ``count`` newest running nodes of ``group`` to stop (killed after
        ``REMOVE_GRACE_S``, or the program's grace period where longer); their exit is not a
        failure."""
        with self._lock:
            labels = self.running(group)[::-1][:count]
            for label in labels:
                self.states[label] = NodeState.REMOVING
                self._remove_by[label] = time.monotonic() + max(self._grace_s, REMOVE_GRACE_S)
                self.workers[label].terminate()
        return labels

    def scale(self, group: str, count: int, bounds: tuple[int, int] = (0, 1_000_000)) -> list[dict[str, Any]]:
        """Grows or shrinks ``group`` to ``count`` running nodes (``bounds``: the counts
        allowed, inclusive); returns the node table."""
        low, high = bounds
        if isinstance(count, bool) or not isinstance(count, int) or not low <= count <= high:
            raise ValueError(f"group {group!r} can run between {low} and {high} nodes, not {count!r}")
        if group not in self.program.node_factories:
            raise ValueError(
                f"group {group!r} cannot be scaled (scalable: {sorted(self.program.node_factories) or 'none'})"
            )
        change = count - len(self.running(group))
        if change > 0:
            self.add_nodes(group, change)
        elif change < 0:
            self.remove_nodes(group, -change)
        return self.status()

    def status(self) -> list[dict[str, Any]]:
        """One row per node: label, group, state, restarts, log."""
        with self._lock:
            rows = []
            for label, w in self.workers.items():
                state = self.states[label]
                shown = f"failed ({self.exit_codes.get(label)})" if state == NodeState.FAILED else state.value
                rows.append(
                    {
                        "label": label,
                        "group": w.node.group,
                        "state": shown,
                        "restarts": w.restarts if w.managed_restarts else self.restarts[label],
                        "log": w.log_path,
                    }
                )
            return rows

    def summary(self) -> str:
        rows = [
            f"program {self.program.name!r} {'FAILED' if self.failed else 'ended'}: {self.reason} "
            f"({getattr(self, 'elapsed_s', time.monotonic() - self.start_time):.1f}s, {self.launcher})",
            f"  {'node':<14} {'group':<10} {'state':<12} {'restarts':>8}  log",
        ]
        for row in self.status():
            rows.append(
                f"  {row['label']:<14} {row['group']:<10} {row['state']:<12} {row['restarts']:>8}  {row['log']}"
            )
        return "\n".join(rows)
