"""How one process paces its learner against its actor (the single-process runner's rule).

In one process the actor, an embedded Reverb server and the learner share one thread, paced by
one rule for every agent and table (after Acme's runner): inserts never block (the tables'
rate limiters are rebuilt without an insert bound), and after each vector step the learner
takes its next batch if it is waiting, and goes on stepping while the table could serve yet
another batch (it lags behind the rate limiter; the runner waits the moment the prefetch thread
needs to deliver it). So a replay ratio (a ``SampleToInsertRatio`` table) and an on-policy
queue pace the same way, and updates spread out between actor steps instead of bunching.

Replay serves the learner only the batches this rule asks for (``server.grant``: the native
backend samples a granted batch while the actor waits for it, after the priority updates of every
earlier update, so a seeded run samples the same items every time; Reverb samples freely).

Actor parameters come from the learner object itself, pulled synchronously, so a seeded run
acts reproducibly. An ``on_policy`` agent pulls after the learner stepped (every rollout is
acted with the newest params); any other agent pulls before, so the update it dispatches runs
on the devices while the actor takes its next vector step (acting one update behind).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import Any

import numpy as np

from shoal.core.interfaces import Actor, Learner
from shoal.core.types import Step


class LearningActor(Actor):
    """An actor whose ``update`` steps the learner while data is ready (the pacing rule in the
    module docstring) and refreshes the actor's parameters: after that if ``pull_after``,
    else before. The learner reads ``items_per_update`` items of ``table`` per step.

    When the table could serve a batch the actor waits for the learner's prefetch thread to
    deliver it: a failure there reaches the learner at once (``ready``, then ``step`` raises
    it); only a batch that neither arrives nor fails in ``timeout_s`` (a stuck sampler, not a
    slow machine) ends the run with a ``TimeoutError``."""

    def __init__(
        self,
        actor: Actor,
        learner: Learner,
        server: Any,
        table: str,
        items_per_update: int,
        pull_after: bool,
        timeout_s: float = 600.0,
        first_update: Callable[[], AbstractContextManager] = contextlib.nullcontext,
    ) -> None:
        self._actor, self._learner, self._server, self._table = actor, learner, server, table
        self._items_per_update, self._pull_after, self._timeout_s = items_per_update, pull_after, timeout_s
        self._items_consumed = 0
        self._items_granted = 0  # (items replay was allowed to serve the learner)
        self._first_update = first_update  # (around the learner's first step, which compiles its update)

    def _behind(self) -> bool:
        """Whether the table can serve another batch now, or (for an on-policy agent, which must
        not act before training on it) already served one that is on its way to the learner."""
        if self._server.can_sample(self._table, self._items_per_update):
            return True
        return self._pull_after and (
            self._server.items_sampled(self._table) >= self._items_consumed + self._items_per_update
        )

    def select_action(self, observation: np.ndarray) -> tuple[np.ndarray, Mapping[str, np.ndarray]]:
        return self._actor.select_action(observation)

    @property
    def prefetches(self) -> bool:
        """Whether the loop should hand ``observe`` the next observation: for an on-policy agent
        (its params change only when a rollout is done), to a prefetching actor (``BatchedActor``).
        Another agent's params change at almost every step, and a prefetched action would be
        computed again."""
        return self._pull_after and getattr(self._actor, "prefetches", False)

    def observe(self, step: Step, next_observation: Any = None, stopwatch: Any = None) -> None:
        if next_observation is None:
            self._actor.observe(step)
        else:
            self._actor.observe(step, next_observation, stopwatch)  # type: ignore[call-arg]  # (a prefetching actor's)

    def _train(self) -> None:
        stepped, waiting_since = False, None
        while True:
            in_flight = self._items_granted > self._items_consumed  # (a granted batch: wait for it)
            behind = in_flight or self._behind()
            if behind and not in_flight and not self._learner.ready():
                self._server.grant(
                    self._table, self._items_per_update, after_mutations=self._items_consumed // self._items_per_update
                )
                self._items_granted += self._items_per_update
            if self._learner.ready() and (behind or not stepped):
                if self._items_consumed:
                    self._learner.step()
                else:
                    with self._first_update():
                        self._learner.step()
                self._items_consumed += self._items_per_update
                self._items_granted = max(self._items_granted, self._items_consumed)
                stepped, waiting_since = True, None
            elif not behind:
                return
            elif waiting_since is None:
                waiting_since = time.monotonic()
            elif time.monotonic() - waiting_since > self._timeout_s:
                raise TimeoutError(
                    f"replay table '{self._table}' could serve a batch, but none "
                    f"reached the learner within {self._timeout_s}s"
                )
            else:  # (the first batch: the learner's dataset opens, importing TensorFlow)
                with self._learner.stopwatch.time("sample_wait" if self._items_consumed else "replay_open"):
                    time.sleep(0.0002)  # the learner's prefetch thread is fetching the batch

    def update(self, wait: bool = False) -> None:
        if self._pull_after:
            self._train()
            self._actor.update(wait)
        else:
            self._actor.update(wait)
            self._train()
