"""Actors scaled from the time breakdown: the rule that decides, on measured windows.

A distributed run started with ``num_actors="auto"`` (or ``"auto:MIN-MAX"``) is watched by the
driver (``autoscale_loop``), which every few seconds measures one ``Window`` -- the share of
its time the learner waited for samples, the share the actors spent in ``replay_insert``
(where the rate limiter holds them), the run's env steps per second and the machine's free
room -- and asks ``Autoscaler.decide`` for the actor count. The rule, in order:

1. for ``cooldown_s`` after a change, hold (the new actor starts, the window refills);
2. after a growth: if env steps/s did not rise by ``min_gain`` over the window before it,
   remove the actor again and grow no further than the count before for ``retry_s``;
3. shrink by one while the actors are blocked on inserts more than ``shrink_blocked`` of their
   time, or the learner is saturated (waits less than ``saturated_wait``) while they are
   blocked more than half that;
4. grow by one while the learner waits more than ``grow_wait`` of its time, the actors are
   blocked less than half of ``shrink_blocked``, and the machine has room (``room``: free
   cores, or free cluster resources);
5. otherwise hold.

Bounded by ``[low, high]``. Every decision has a reason with the figures that caused it.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

AUTO = re.compile(r"^auto(?::(\d+)-(\d+))?$")


def parse_auto(value: Any, cap: int, default_high: int) -> tuple[int, int] | None:
    """``(low, high)`` of ``"auto"`` (``(1, default_high)``) or ``"auto:MIN-MAX"``; ``None`` for
    anything else that is not a string (a count). Raises ``ValueError`` for a bad spec."""
    if not isinstance(value, str):
        return None
    match = AUTO.match(value.strip())
    if match is None:
        raise ValueError(
            f"the number of actors must be an integer, 'auto' or 'auto:MIN-MAX' (e.g. auto:1-8), got {value!r}"
        )
    if match.group(1) is None:
        return 1, max(1, min(default_high, cap))
    low, high = int(match.group(1)), int(match.group(2))
    if not 1 <= low <= high <= cap:
        raise ValueError(
            f"auto:{low}-{high}: the bounds must satisfy 1 <= MIN <= MAX <= {cap} "
            f"on this machine, got MIN={low}, MAX={high}"
        )
    return low, high


@dataclasses.dataclass(frozen=True)
class Window:
    """What one measuring window saw (shares are fractions of the window's wall time)."""

    learner_wait: float  # the learner's sample_wait share
    actors_blocked: float  # the mean replay_insert share of the actors that ran the whole window
    steps_per_s: float  # the run's env steps per second
    room: bool  # whether the machine (or cluster) can run one more actor
    room_text: str = ""  # what room there is, in words

    def text(self) -> str:
        return (
            f"learner waits {self.learner_wait:.0%}, actors blocked on inserts {self.actors_blocked:.0%}, "
            f"{self.steps_per_s:,.0f} env steps/s, {self.room_text or ('room' if self.room else 'no room')}"
        )


@dataclasses.dataclass(frozen=True)
class Decision:
    target: int
    reason: str


@dataclasses.dataclass
class Autoscaler:
    low: int
    high: int
    count: int  # actors running now
    cooldown_s: float = 12.0
    grow_wait: float = 0.25
    shrink_blocked: float = 0.5
    saturated_wait: float = 0.02
    min_gain: float = 0.05
    retry_s: float = 120.0
    _changed_at: float = -1e18
    _grown_from: tuple[int, float] | None = None  # (count before, steps/s before) of the last growth
    _ceiling: tuple[int, float] | None = None  # (most actors, until when)

    def decide(self, window: Window, now: float) -> Decision:
        """The actor count for ``window`` (measured up to ``now``, seconds); records a change."""
        decision = self._rule(window, now)
        if decision.target != self.count:
            grew = decision.target > self.count
            self._grown_from = (self.count, window.steps_per_s) if grew else None
            self.count, self._changed_at = decision.target, now
        return decision

    def _rule(self, w: Window, now: float) -> Decision:
        n = self.count
        if now - self._changed_at < self.cooldown_s:
            return Decision(n, f"cooling down after the last change ({w.text()})")
        if self._grown_from is not None:
            before, speed = self._grown_from
            self._grown_from = None
            if w.steps_per_s < speed * (1 + self.min_gain) and n > self.low:
                self._ceiling = (before, now + self.retry_s)
                return Decision(
                    before,
                    f"actor {n} did not raise throughput ({speed:,.0f} -> "
                    f"{w.steps_per_s:,.0f} env steps/s): back to {before}",
                )
        saturated = w.learner_wait < self.saturated_wait and w.actors_blocked > self.shrink_blocked / 2
        if (w.actors_blocked > self.shrink_blocked or saturated) and n > self.low:
            self._ceiling = (n, now + self.retry_s)
            why = "actors blocked on inserts" if w.actors_blocked > self.shrink_blocked else "learner saturated"
            return Decision(n - 1, f"{why}: {w.text()}")
        if w.learner_wait > self.grow_wait and w.actors_blocked < self.shrink_blocked / 2:
            ceiling = self.high
            if self._ceiling is not None and now < self._ceiling[1]:
                ceiling = min(ceiling, self._ceiling[0])
            if n >= ceiling:
                bound = "MAX" if ceiling == self.high else "where more did not pay"
                return Decision(n, f"learner waits, but {n} actors is the most allowed ({bound}): {w.text()}")
            if not w.room:
                return Decision(n, f"learner waits, but no room for another actor: {w.text()}")
            return Decision(n + 1, f"learner waits for samples: {w.text()}")
        return Decision(n, f"balanced: {w.text()}")
