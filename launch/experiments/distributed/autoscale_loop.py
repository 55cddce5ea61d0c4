"""The driver's side of ``num_actors="auto"``: measures a ``Window`` every ``period_s`` from the
learner's and the actors' live time breakdowns (their ``timing()``), the counter's env steps and
the machine's free room, asks ``autoscale.Autoscaler`` for the count, scales the actor group, and
keeps every decision (a log line with its figures; ``history`` for the result; ``status()`` for
``shoal status``)."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import Any

from shoal.launch.experiments.distributed.autoscale import Autoscaler, Window


class CpuRoom:
    """Free cores of this machine over the last window, from ``/proc/stat`` (the processes and
    in-process launchers): room for one more actor while ``need`` cores sat idle."""

    def __init__(self, need: float = 0.5) -> None:
        self._need, self._last = need, self._read()

    @staticmethod
    def _read() -> tuple[float, float] | None:
        try:
            with open("/proc/stat") as f:
                fields = [float(x) for x in f.readline().split()[1:]]
        except (OSError, ValueError):
            return None
        return fields[3] + fields[4], sum(fields)  # (idle + iowait, all)

    def __call__(self) -> tuple[bool, str]:
        now, last = self._read(), self._last
        self._last = now
        if now is None or last is None or now[1] <= last[1]:
            return True, "free cores unknown"
        idle = (now[0] - last[0]) / (now[1] - last[1]) * (os.cpu_count() or 1)
        return idle >= self._need, f"{idle:.1f} of {os.cpu_count()} cores idle"


class RayRoom:
    """Free CPUs of the Ray cluster; with none, asks Ray's autoscaler for one more actor's worth
    (``ray.autoscaler.sdk.request_resources``) once per count, and says so."""

    def __init__(self, cpus_per_actor: float = 1.0) -> None:
        self._cpus = cpus_per_actor
        self._asked_for: int | None = None

    def __call__(self) -> tuple[bool, str]:
        import ray  # lazy: optional extra (ray)

        free = float(ray.available_resources().get("CPU", 0.0))
        if free >= self._cpus:
            return True, f"{free:g} cluster CPUs free"
        wanted = int(float(ray.cluster_resources().get("CPU", 0.0)) + self._cpus)
        if self._asked_for == wanted:
            return False, f"no free cluster CPU (asked Ray's autoscaler for {wanted} CPUs)"
        self._asked_for = wanted
        try:
            from ray.autoscaler.sdk import request_resources  # lazy: optional extra (ray)

            request_resources(num_cpus=wanted)
        except Exception as e:  # noqa: BLE001 -- no autoscaler to ask: a fixed cluster
            return False, f"no free cluster CPU, and no autoscaler to ask ({e!r:.80})"
        return (
            False,
            f"no free cluster CPU: asked Ray's autoscaler for {wanted} CPUs (a fixed cluster grows no further)",
        )


class AutoscaleLoop:
    """Polls, decides and scales (``tick``, from the driver's loop)."""

    def __init__(
        self,
        bounds: tuple[int, int],
        count: int,
        room: Callable[[], tuple[bool, str]],
        started_at: float,
        period_s: float = 3.0,
        **rule: Any,
    ) -> None:
        self.scaler = Autoscaler(low=bounds[0], high=bounds[1], count=count, **rule)
        self._room, self._period_s, self._started_at = room, period_s, started_at
        self._last: dict[str, Any] | None = None  # the previous poll's readings
        self._due = time.monotonic() + period_s
        self._clients: dict[str, Any] = {}
        self.history: list[dict[str, Any]] = [{"t_s": 0.0, "actors": count, "reason": "start"}]
        self.last_reason = "measuring the first window"
        self.pinned: int | None = None  # set by a manual `shoal scale`: no more autoscaling

    def status(self) -> dict[str, Any]:
        """The mode, the target and why (``shoal status``)."""
        mode = f"auto:{self.scaler.low}-{self.scaler.high}"
        if self.pinned is not None:
            return {"mode": mode, "target": self.pinned, "reason": "pinned by hand (shoal scale): not scaling"}
        return {"mode": mode, "target": self.scaler.count, "reason": self.last_reason}

    def tick(self, run, counter_client) -> None:
        """One poll, when due: measures a window, decides, scales (``run.scale``)."""
        now = time.monotonic()
        if now < self._due or self.pinned is not None:
            return
        self._due = now + self._period_s
        readings = self._read(run, counter_client)
        if readings is None:
            return
        last, self._last = self._last, readings
        if last is None:
            return
        decision = self.scaler.decide(_window(last, readings, *self._room()), now)
        self.last_reason = decision.reason
        running = len(run.running("actor"))
        if decision.target != running:
            print(
                f"shoal: autoscale: {running} -> {decision.target} actors: {decision.reason}",
                file=sys.stderr,
                flush=True,
            )
            run.scale("actor", decision.target, (self.scaler.low, self.scaler.high))
            self.history.append(
                {"t_s": round(time.time() - self._started_at, 1), "actors": decision.target, "reason": decision.reason}
            )
            self._last = None  # (the next window starts after the change)

    def _timing(self, run, label: str) -> dict[str, Any]:
        """``label``'s ``timing()`` (its client kept while it answers; 2 s at most)."""
        if label not in self._clients:
            self._clients[label] = run.client(label, timeout_s=2)
        try:
            return self._clients[label].futures.timing().result(timeout=2)
        except BaseException:
            self._clients.pop(label, None)  # (restarted: a new address next time)
            raise

    def _read(self, run, counter_client) -> dict[str, Any] | None:
        try:
            learner = self._timing(run, "learner")
            env_steps = float(counter_client.get_counts().get("env_steps", 0))
        except Exception:  # noqa: BLE001 -- not serving yet, or ending: no window this time
            return None
        actors = {}
        for label in run.running("actor", placed=True):
            if run.serving(label) and run.is_running(label):
                try:
                    actors[label] = self._timing(run, label)
                except Exception:  # noqa: BLE001 -- restarting or being removed: left out
                    pass
        return {"at": time.monotonic(), "learner": learner, "actors": actors, "env_steps": env_steps}


def _share(before: dict[str, Any], after: dict[str, Any], component: str) -> float | None:
    wall = after["wall_s"] - before["wall_s"]
    if wall <= 0:
        return None
    spent = after["time_s"].get(component, 0.0) - before["time_s"].get(component, 0.0)
    return min(max(spent / wall, 0.0), 1.0)


def _window(last: dict[str, Any], now: dict[str, Any], room: bool, room_text: str) -> Window:
    """The window between two polls' readings (actors that were not in both are left out)."""
    wait = _share(last["learner"], now["learner"], "sample_wait") or 0.0
    blocked = [
        s
        for label, after in now["actors"].items()
        if label in last["actors"]
        for s in [_share(last["actors"][label], after, "replay_insert")]
        if s is not None
    ]
    seconds = max(now["at"] - last["at"], 1e-9)
    return Window(
        learner_wait=wait,
        actors_blocked=sum(blocked) / len(blocked) if blocked else 0.0,
        steps_per_s=(now["env_steps"] - last["env_steps"]) / seconds,
        room=room,
        room_text=room_text,
    )
