"""What the learner node of a distributed run does: trains as fast as replay serves batches,
serves its parameters, reports its SGD steps, and writes its half of each checkpoint between two
updates. (The actor and evaluator nodes are in ``shoal.launch.experiments.distributed.workers``.)
"""

from __future__ import annotations

import concurrent.futures
import queue
import sys
import threading
import time
from typing import Any, cast

import jax

from shoal.core.counting import Counter
from shoal.core.loggers import make_logger
from shoal.core.notices import COMPILE_HINT, while_slow
from shoal.core.specs import EnvironmentSpec
from shoal.core.timing import Stopwatch
from shoal.envs.snapshot_pool import SnapshotPool
from shoal.launch.experiments.config import ExperimentConfig
from shoal.launch.experiments.distributed.shared_params import ParamsPublisher
from shoal.launch.experiments.distributed.step_grants import LEARNING
from shoal.launch.experiments.distributed.workers import failure, summary
from shoal.launch.experiments.run_directory.checkpoints import Checkpointer, restore_learner
from shoal.launch.experiments.run_directory.self_play_pools import restore_pool, save_pool
from shoal.launch.programs.nodes import should_stop
from shoal.replay.contract import ReplayClient


class LearnerWorker:
    """Trains as fast as replay serves batches, serves its parameters (RPC, and shared memory
    for nodes on its host), reports its SGD steps to the counter, and writes the learner and
    replay half of the run's checkpoints when the driver asks. ``spec``: the run's env spec
    (the driver's: this node steps no env)."""

    def __init__(
        self,
        config: ExperimentConfig,
        spec: EnvironmentSpec,
        replay: ReplayClient,
        counter,
        resume: dict[str, Any] | None = None,
    ) -> None:
        self._counter, self._replay = counter, replay
        builder = config.builder
        self._local, self.stopwatch = Counter(), Stopwatch()
        logger = make_logger("learner", config.run.dir, terminal=False, step_key="learner_steps")
        dataset = builder.make_dataset_iterator(replay, spec)
        self._learner = builder.make_learner(
            jax.random.PRNGKey(config.run.seed),
            config.make_networks(spec),
            dataset,
            logger,
            self._local,
            replay,
            self.stopwatch,
        )
        self._checkpointer = Checkpointer(config.run.dir) if config.run.dir else None
        self._resumed: dict[str, Any] | None = None
        if resume is not None:
            self._local.restore({k: v for k, v in resume["counter"].items() if k == "learner_steps"})
            self._resumed = {
                "env_steps": resume["env_steps"],
                "learner_version": resume["learner_version"],
                "learner_digest": restore_learner(cast(str, config.run.dir), self._learner, resume),
                "replay_items": _replay_items(replay),
                "checkpoint_replay_items": resume.get("replay_items"),
                "checkpoint_replay_items_range": resume.get("replay_items_range"),
            }
            print(f"[learner] resumed at env step {resume['env_steps']:,}: {self._resumed}", flush=True)
        self._run_dir, self._pool = config.run.dir, None
        if config.multiagent.self_play:  # (its snapshot pool: taken here, served to the actors and the evaluator)
            self._pool = SnapshotPool(config.multiagent.self_play_pool, config.multiagent.self_play_every)
            if resume is None or not restore_pool(
                self._pool, cast(str, config.run.dir), resume, self._learner.get_variables()[1]
            ):
                self._pool.maybe_add(self._learner)
        # Compile before this node serves (actors and the evaluator wait for it), so the first
        # batches are trained on at once rather than after the compiler (seconds on a CPU). The
        # agent's example batch needs no TensorFlow: the dataset imports it at its first batch.
        with while_slow("compiling the learner's update", sys.stdout, label="learner", hint=COMPILE_HINT):
            self._learner.warm_up(builder.example_batch(spec))
        self._requests: queue.Queue = queue.Queue()  # checkpoints asked for, taken between updates
        self._running = threading.Event()
        self._first_update_at: float | None = None
        self._first_update_env_steps: int | None = None  # (the run's env steps then)
        self._started: float | None = None
        self._params = ParamsPublisher(self._learner)  # for nodes on this host: no RPC copy per fetch

    def get_variables(self, known_version: int = -1):
        return self._learner.get_variables(known_version)

    def shared_params(self) -> dict[str, str] | None:
        """Where this host's nodes read the parameters from shared memory (``None``: use RPC)."""
        return self._params.location()

    def version(self) -> int:
        return self._learner.version

    def snapshot_versions(self) -> list[int]:
        """A self-play run's snapshot pool: the versions it holds (``shoal.envs.snapshot_pool``)."""
        return self._pool.versions if self._pool is not None else []

    def snapshot(self, version: int) -> Any:
        """The pool's snapshot of ``version`` (``None``: no longer held)."""
        return self._pool.get(version) if self._pool is not None else None

    def timing(self) -> dict[str, Any]:
        """Seconds per component so far and the wall seconds they are of (the autoscaler's)."""
        return {
            "time_s": self.stopwatch.snapshot(),
            "wall_s": time.monotonic() - self._started if self._started else 0.0,
        }

    def checkpoint(self, env_steps: int) -> dict[str, Any]:
        """Writes replay's and the learner's checkpoints (between two updates); returns what was
        written (for ``run.json``), with ``learner_steps``: the learner's count as of that state."""
        if self._checkpointer is None:
            raise RuntimeError("this run has no run directory to checkpoint into")
        done: concurrent.futures.Future = concurrent.futures.Future()
        self._requests.put((int(env_steps), done))
        while True:
            try:
                return done.result(timeout=0.5)
            except concurrent.futures.TimeoutError:
                if not self._running.is_set() and not done.done():
                    raise RuntimeError("the learner stopped before it could checkpoint") from None

    def _serve_checkpoints(self) -> None:
        while not self._requests.empty():
            env_steps, done = self._requests.get()
            try:
                # (checkpoints are asked for only where there is a run dir, and so a checkpointer)
                written = cast(Checkpointer, self._checkpointer).save(env_steps, self._learner, self._replay)
                if self._pool is not None:  # (its own file per checkpoint, named in run.json)
                    written["self_play_pool"] = save_pool(self._pool, cast(str, self._run_dir), written)
                done.set_result({**written, "learner_steps": int(self._local.get_counts().get("learner_steps", 0))})
            except BaseException as e:  # noqa: BLE001 -- the caller gets it
                done.set_exception(e)

    def run(self) -> dict[str, Any]:
        reported = self._local.get_counts()  # (a resumed counter already holds the restored totals)
        last = started = self._started = time.monotonic()
        waiting = self.stopwatch.time("sample_wait")
        self._running.set()
        try:
            while not should_stop():
                self._serve_checkpoints()
                if not self._learner.ready():  # the rate limiter holds sampling back: wait for actors
                    with waiting:
                        time.sleep(0.001)
                    continue
                self._learner.step()
                if self._pool is not None:
                    self._pool.maybe_add(self._learner)
                if self._first_update_at is None:  # (reported at once: actors are paced until then)
                    self._first_update_at = time.time()
                    reported, last = self._report(reported, first=True), time.monotonic()
                if time.monotonic() - last > 0.5:  # learner_steps, stale_batches_dropped, ...
                    reported, last = self._report(reported), time.monotonic()
        except Exception as e:  # noqa: BLE001 -- raised again unless the program is ending
            if not should_stop():
                raise
            # (a stop that came while the update waited on replay, which then closed: no failure)
            print(f"[learner] stopping: its last update did not end ({failure(e)}); the program is ending", flush=True)
        finally:
            self._running.clear()
            self._serve_checkpoints()  # (one asked for just before the stop)
            try:
                self._learner.check_finite()
            finally:
                self._params.close()
                self._learner.close()
        try:
            self._report(reported)
        except Exception as e:  # noqa: BLE001 -- the counter stopped first (the program is ending)
            print(f"[learner] stopping: its last counts were not reported ({failure(e)})", flush=True)
        pool = {"self_play_pool": self._pool.versions} if self._pool is not None else {}
        return summary(
            self.stopwatch,
            time.monotonic() - started,
            first_update_at=self._first_update_at,
            first_update_env_steps=self._first_update_env_steps,
            counts=self._local.get_counts(),
            resumed=self._resumed,
            **pool,
        )

    def _report(self, reported: dict[str, int], first: bool = False) -> dict[str, int]:
        """Adds the learner's counts since ``reported`` to the run's counter; ``first``: its first
        update, also ``LEARNING`` (which ends the actors' pacing)."""
        counts = self._local.get_counts()
        fields = {k: v - reported.get(k, 0) for k, v in counts.items()}
        if first:
            fields[LEARNING] = 1
        run = self._counter.increment(**fields)
        if first:
            self._first_update_env_steps = int(run.get("env_steps", 0))
        return counts


def _replay_items(replay) -> dict[str, int]:
    return {name: int(info.current_size) for name, info in replay.server_info().items()}
