"""Where a run's time goes: seconds per component, measured where the work is done.

A ``Stopwatch`` sums the wall seconds its owner's thread spends inside ``with
stopwatch.time("env_step"):`` blocks, per component name. Nested blocks count exclusively:
while an inner block runs, the outer one's clock is paused (in one process, the learner's steps
run inside the actor's ``update``; they count as ``sgd_update``, not ``param_fetch``). Components of a run (named the same
everywhere, so that runs and nodes compare):

* ``env_step`` -- the vector env's ``step``;
* ``policy`` -- policy inference (``select_action``: the jitted policy, to host);
* ``replay_insert`` -- the adder writing to Reverb (``observe``);
* ``param_fetch`` -- the actor refreshing its parameters (``update``);
* ``sample_wait`` -- the learner waiting for a batch from replay;
* ``replay_open`` -- in one process, the wait for the learner's first batch: its replay dataset
  opens then, importing TensorFlow (about 3 s of CPU on 2 cores, in no other component);
* ``sgd_update`` -- the learner's update (dispatch, plus waiting for the previous one);
* ``evaluation`` -- greedy evaluation episodes;
* ``video`` -- an evaluation episode rendered and written as a video (``video_every``).

``breakdown`` turns seconds into fractions of a wall time, with ``other`` for the rest (Python
between components, logging, checkpoints). JAX dispatches asynchronously: device work shows up
in the component that waits for it, so the fractions are of the calling thread's time.
"""

from __future__ import annotations

import os
import time
from collections import defaultdict
from collections.abc import Mapping

_IMPORTED = time.monotonic()

COMPONENTS = (
    "env_step",
    "policy",
    "replay_insert",
    "param_fetch",
    "sample_wait",
    "replay_open",
    "sgd_update",
    "evaluation",
    "video",
)


class Stopwatch:
    """Seconds per component, for one thread (or threads that take turns)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self._open: list[str] = []
        self._since = 0.0
        self._timings: dict[str, _Timing] = {}

    def time(self, component: str) -> _Timing:
        """A context manager timing ``component`` (the same small object each time: cheap)."""
        timing = self._timings.get(component)
        if timing is None:
            timing = self._timings[component] = _Timing(self, component)
        return timing

    def _enter(self, component: str) -> None:
        now = time.perf_counter()
        if self._open:  # pause the enclosing component
            self.seconds[self._open[-1]] += now - self._since
        self._open.append(component)
        self._since = now

    def _exit(self) -> None:
        now = time.perf_counter()
        self.seconds[self._open.pop()] += now - self._since
        self._since = now  # (the enclosing component, if any, resumes)

    def snapshot(self) -> dict[str, float]:
        """A copy of ``seconds`` (also from another thread, while the owner adds components)."""
        while True:
            try:
                return dict(self.seconds)
            except RuntimeError:  # (a component was added during the copy)
                continue

    def add(self, component: str, seconds: float) -> None:
        self.seconds[component] += seconds

    def since(self, earlier: Mapping[str, float]) -> dict[str, float]:
        """Seconds per component since ``earlier`` (a copy of ``seconds`` taken then)."""
        return {k: v - earlier.get(k, 0.0) for k, v in self.seconds.items() if v - earlier.get(k, 0.0) > 0}


class _Timing:
    __slots__ = ("_stopwatch", "_component")

    def __init__(self, stopwatch: Stopwatch, component: str) -> None:
        self._stopwatch, self._component = stopwatch, component

    def __enter__(self) -> None:
        self._stopwatch._enter(self._component)

    def __exit__(self, *exc: object) -> None:
        self._stopwatch._exit()


def breakdown(seconds: Mapping[str, float], wall_s: float) -> dict[str, float]:
    """``seconds`` as fractions of ``wall_s`` (rounded to 3 places), plus ``other``: the rest."""
    wall_s = max(wall_s, 1e-9)
    out = {k: round(v / wall_s, 3) for k, v in seconds.items() if v > 0}
    out["other"] = round(max(0.0, 1.0 - sum(seconds.values()) / wall_s), 3)
    return out


def process_seconds() -> float:
    """Seconds since this process started, as the OS recorded its start (Linux: ``/proc``, to
    10 ms; elsewhere: since this module was imported). A run's ``process_s``: with ``shoal
    train``, the whole command, interpreter start and imports included."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()  # (field 2, the name, may hold spaces)
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return max(uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK"), 0.0)  # field 22: starttime
    except (OSError, ValueError, IndexError):
        return time.monotonic() - _IMPORTED
