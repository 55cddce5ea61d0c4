"""What the evaluator node of a distributed run does: evaluates on schedule, ends the program
when the target return is reached or the step budget is spent, and returns the run's result
(the actors' nodes are in ``shoal.launch.experiments.distributed.workers``)."""

from __future__ import annotations

import time
from typing import Any

import jax

from shoal.launch.experiments.config import ExperimentConfig
from shoal.launch.experiments.distributed.shared_params import LocalFirstSource
from shoal.launch.experiments.distributed.step_grants import ALIVE, STALL_S, committed_env_steps, holders
from shoal.launch.experiments.distributed.workers import self_play_pool, summary
from shoal.launch.experiments.evaluation import Evaluator
from shoal.launch.programs.nodes import should_stop


class EvaluatorWorker:
    """Evaluates on schedule and ends the program when the target return is reached, the step
    budget is spent, or the program is asked to stop; returns the run's result.

    The budget is spent once the counter's ``env_steps`` reaches ``max_env_steps`` -- or once it
    is all granted (``StepGrants``) and every actor holding a part of it is frozen: its
    heartbeat (``step_grants.Heartbeat``) stopped for ``STALL_S``. The run then ends short of
    its budget by what they hold (the result's ``env_steps_held``; the node's ``warning``, which
    the driver prints) rather than waiting for them forever. An actor whose steps wait (on the
    rate limiter, on a learner that a busy machine slows down) beats on and is waited for,
    however long no step is reported."""

    def __init__(
        self,
        config: ExperimentConfig,
        learner,
        counter,
        launched_at: float | None = None,
        resume: dict[str, Any] | None = None,
    ) -> None:
        self._config, self._counter, self._learner = config, counter, learner
        self._start, self._launched_at = time.monotonic(), launched_at or time.time()
        self._evaluator = Evaluator(
            config,
            LocalFirstSource(learner),
            jax.random.PRNGKey(config.run.seed + 1),
            self._start,
            should_stop=should_stop,
        )
        if resume:
            self._evaluator.restore(resume)
        self._pool = self_play_pool(config, learner)
        if self._pool is not None:
            self._evaluator.play_against(self._pool)

    def save(self) -> dict[str, Any]:
        """The evaluation schedule (where the next evaluation falls, what the last found)."""
        return self._evaluator.save()

    def progress(self) -> dict[str, Any]:
        last = self._evaluator.last_return
        return {"eval_return": last, "num_evals": self._evaluator.num_evals, "last_at": self._evaluator.last_at}

    def run(self) -> dict[str, Any]:
        evaluator, counts, budget = self._evaluator, {}, self._config.run.max_env_steps
        held, warning, beats = 0, None, Heartbeats()
        while not should_stop():
            counts = self._counter.get_counts()
            env_steps = int(counts.get("env_steps", 0))
            beats.saw(counts)
            out_of_budget = env_steps >= budget
            frozen = (
                beats.frozen(holders(counts)) if not out_of_budget and committed_env_steps(counts) >= budget else {}
            )
            if frozen:
                out_of_budget, held = True, committed_env_steps(counts) - env_steps
                warning = (
                    f"the run ends at {env_steps:,} of its {budget:,} env steps: the rest is granted to "
                    + ", ".join(f"{label} ({n:,} steps)" for label, n in sorted(frozen.items()))
                    + f", whose heartbeat stopped {STALL_S:g} s ago (frozen?)"
                )
                print(f"[evaluator] {warning}", flush=True)
            if evaluator.due(env_steps) or out_of_budget:
                if self._pool is not None:  # (the win rates against the pool: its latest snapshots)
                    self._pool.sync()
                if evaluator.run(env_steps) or out_of_budget:
                    break
            time.sleep(0.05)
        counts = self._counter.get_counts()
        result = evaluator.result(
            counts.get("env_steps", 0), counts.get("learner_steps", 0), time.time() - self._launched_at
        )
        if should_stop():
            result["stopped"] = True
        if held:
            result["env_steps_held"] = held
        evaluator.close()
        return {
            **summary(evaluator.stopwatch, time.monotonic() - self._start),
            "result": result,
            "schedule": evaluator.save(),
            **({"warning": warning} if warning else {}),
        }


class Heartbeats:
    """When the evaluator last saw each actor's heartbeat count (``step_grants.ALIVE``) change."""

    def __init__(self) -> None:
        self._seen: dict[str, tuple[float, float]] = {}  # label: (count, since when)

    def saw(self, counts: dict[str, float]) -> None:
        now = time.monotonic()
        for key, count in counts.items():
            if key.startswith(ALIVE) and self._seen.get(key[len(ALIVE) :], (None,))[0] != count:
                self._seen[key[len(ALIVE) :]] = (count, now)

    def frozen(self, held: dict[str, int]) -> dict[str, int]:
        """``held`` (``{label: env steps}``, ``step_grants.holders``) if every one of them has
        shown no heartbeat for ``STALL_S`` (one that never beat: since it was first seen
        holding), else ``{}``."""
        now = time.monotonic()
        for label in held:
            self._seen.setdefault(label, (-1.0, now))
        if held and all(now - self._seen[label][1] > STALL_S for label in held):
            return held
        return {}
