"""An actor's share of a distributed run's env-step budget (``StepGrants``), reserved from the
counter before it steps, what the counter's grant keys add up to (``committed_env_steps``) and
who holds them (``holders``), and an actor's sign of life (``Heartbeat``), by which the
evaluator tells an actor that waits (on the rate limiter, on a learner slowed by a busy
machine) from one that is frozen. Until the learner's first update an actor is paced: it steps
only its head start."""

from __future__ import annotations

import threading
import time

GRANT_S = 0.25  # an actor reserves about this long's worth of vector steps at a time
GRANTED, SETTLED = "env_steps_granted_", "env_steps_settled_"  # counter keys, + the actor's label
ALIVE = "actor_alive_"  # counter key, + the actor's label: its heartbeats (``Heartbeat``)
HEARTBEAT_S = 0.5  # an actor's heartbeat period
STALL_S = 10.0  # an actor holding a grant whose heartbeat stopped for this long is frozen
LEARNING = "learner_updating"  # counter key: the learner of this launch made its first update
TRANSIENT = (GRANTED, SETTLED, ALIVE, LEARNING)  # counter keys of this launch only (run.json leaves them out)


def committed_env_steps(counts: dict[str, float]) -> int:
    """The env steps a run has taken or granted (``StepGrants``): ``env_steps`` plus every
    actor's grants not yet settled."""
    return int(counts.get("env_steps", 0)) + int(
        sum(v - counts.get(SETTLED + k[len(GRANTED) :], 0) for k, v in counts.items() if k.startswith(GRANTED))
    )


def holders(counts: dict[str, float]) -> dict[str, int]:
    """``{label: env steps}`` of the actors holding grants they have not settled (taken and
    not reported yet, or not taken)."""
    held = {
        k[len(GRANTED) :]: int(v - counts.get(SETTLED + k[len(GRANTED) :], 0))
        for k, v in counts.items()
        if k.startswith(GRANTED)
    }
    return {label: n for label, n in held.items() if n > 0}


class Heartbeat:
    """An actor's sign of life: a thread of its own adds 1 to the counter's ``ALIVE + label``
    every ``HEARTBEAT_S``, also while the actor's step waits (on the table's rate limiter, on a
    learner that a busy machine slows down), and stops only with the process (frozen, killed)
    or ``stop()``. A failed call is skipped (the next one tries again)."""

    def __init__(self, counter, label: str) -> None:
        self._counter, self._key = counter, ALIVE + label
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="shoal-heartbeat", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        while True:
            try:
                self._counter.increment(**{self._key: 1})
            except Exception:  # noqa: BLE001 -- (the counter is busy or ending: the next beat)
                pass
            if self._stop.wait(HEARTBEAT_S):
                return

    def stop(self) -> None:
        self._stop.set()


class StepGrants:
    """An actor's share of the run's env-step budget, reserved from the counter before it steps,
    so that a distributed run stops within one vector step of ``max_env_steps`` however many
    actors it has and however rarely they report.

    The counter holds, besides ``env_steps`` (steps taken and reported), per actor the env steps
    granted to it (``env_steps_granted_<label>``) and those it settled (``env_steps_settled_<label>``:
    taken and reported, or handed back). The run has committed to ``env_steps + sum(granted -
    settled)`` steps. An actor with no granted vector step left asks for a chunk of ``c`` env
    steps (about ``GRANT_S`` of its own stepping, a multiple of ``num_envs``) in the
    ``increment`` that reports its steps; the reply (one atomic snapshot) places its chunk at
    ``[start, start + c)`` of the committed steps, and it may take ``ceil((budget - start) /
    num_envs)`` vector steps of it (none if ``start >= budget``, all if the chunk ends within
    the budget). It hands the rest back at once (a second call, made only at the budget: a
    refused grant held on would starve the others). Only the one chunk that crosses the budget
    rounds up, so the run counts at most ``num_envs - 1`` env steps past ``max_env_steps`` (the
    single-process runner's bound too), and once ``env_steps`` reaches the budget no actor
    steps again. An actor with no grant asks again every 50 ms (steps handed back, e.g. by an
    actor scaled down, are granted again); one that stops hands its grant back; one restarted
    after a crash settles what its predecessor held (the steps it took and never reported are
    lost, as before: not counted). No call is added per vector step: one per chunk, besides
    the periodic report.

    Pacing: until the counter holds ``LEARNING`` (the learner of this launch made its first
    update; a resumed run's learner compiles again) an actor is granted at most ``head_start``
    env steps in all (the builder's ``env_steps_before_learning`` twice: what one actor needs,
    alone, for the learner's first batches), then waits as at the budget. So actors of a queue
    that never blocks inserts (IMPALA's) do not spend the budget while the learner compiles, as
    a rate-limited table holds the other agents' actors back. ``None``: not paced.
    """

    def __init__(
        self, counter, label: str, budget: int, num_envs: int, restarted: bool = False, head_start: int | None = None
    ) -> None:
        self._counter, self._label, self._budget, self._n = counter, label, int(budget), int(num_envs)
        self._granted, self._settled = GRANTED + label, SETTLED + label
        self.left = 0  # vector steps this actor may still take
        self._unused = 0  # env steps granted that it will not take (settled by its next call)
        self._rate: tuple[float, int] = (time.monotonic(), 0)  # (since, vector steps taken): the chunk size
        self._committed = 0  # the run's committed env steps, as of the last reply
        self._head_start = head_start
        self._kept = 0  # env steps granted to this actor and kept (while paced)
        if restarted:  # the predecessor's grant died with it
            counts = counter.get_counts()
            self._unused = int(counts.get(self._granted, 0) - counts.get(self._settled, 0))

    def took(self) -> None:
        """One vector step taken (``left`` was positive)."""
        since, steps = self._rate
        self.left, self._rate = self.left - 1, (since, steps + 1)

    def report(self, env_steps: int, ask: bool = False, release: bool = False) -> None:
        """Reports ``env_steps`` taken since the last report (one ``increment``: ``env_steps``,
        ``env_steps_<label>``, and its grants settled); ``ask``: asks for the next chunk in the
        same call (``left`` is then what was granted); ``release``: hands back what is left
        (the actor stops)."""
        if release:
            self._unused, self.left = self._unused + self.left * self._n, 0
        fields = {
            "env_steps": env_steps,
            f"env_steps_{self._label}": env_steps,
            self._settled: env_steps + self._unused,
        }
        self._unused, chunk = 0, self._chunk_size() if ask else 0
        if chunk:
            fields[self._granted] = chunk
        counts = self._counter.increment(**fields)
        if not chunk:
            return
        self._committed = committed_env_steps(counts)
        allowed = max(0, min(chunk, self._budget - (self._committed - chunk)))
        if self._head_start is not None:
            if counts.get(LEARNING):  # the learner updates: no more pacing
                self._head_start = None
            else:
                allowed = max(0, min(allowed, self._head_start - self._kept))
        self.left = -(-allowed // self._n)
        self._kept += self.left * self._n
        if self.left * self._n < chunk:  # at the budget (or paced): the rest is handed back at once
            self._counter.increment(**{self._settled: chunk - self.left * self._n})

    def _chunk_size(self) -> int:
        """About ``GRANT_S`` of this actor's stepping (at most the budget not yet committed), in env steps."""
        since, taken = self._rate
        now = time.monotonic()
        per_s = taken / max(now - since, 1e-3) if taken else 64.0
        self._rate = (now, 0)
        remaining = -(-max(self._budget - self._committed, self._n) // self._n)
        return self._n * max(1, min(int(per_s * GRANT_S), 4096, remaining))
