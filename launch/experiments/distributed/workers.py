"""What the actor nodes of a distributed run do (the learner's is in ``learner_worker``, the
evaluator's in ``evaluator_worker``; ``make_distributed_program`` builds the graph;
``run_distributed_experiment`` drives it), and what the nodes share.

Each node's ``run()`` returns its summary -- where its time went (seconds per component and its
wall time), and its own figures -- which the launcher collects for the run's result; each logs
its rows to its own CSV. Nodes with state to checkpoint serve it to the driver: the learner
writes its half of a checkpoint between two updates (``checkpoint``), actors and the evaluator
hand over their schedules (``save``). On resume each node is given its part of the checkpoint.
"""

from __future__ import annotations

import inspect
import threading
import time
from typing import Any, cast

import jax

from shoal.actors import EnvironmentLoop
from shoal.core.interfaces import Actor, Adder
from shoal.core.loggers import make_logger
from shoal.core.specs import EnvironmentSpec, make_environment_spec, map_observation
from shoal.core.timing import Stopwatch
from shoal.envs.snapshot_pool import PoolMirror
from shoal.launch.experiments.config import ExperimentConfig
from shoal.launch.experiments.distributed.shared_params import LocalFirstSource
from shoal.launch.experiments.distributed.step_grants import Heartbeat, StepGrants
from shoal.launch.programs.nodes import current_context, should_stop
from shoal.launch.programs.stopping import failure_line
from shoal.replay.contract import ReplayClient

STOP_FLUSH_S = 1.0  # how long a stopping actor waits for replay to take its last items
SAVE_WAIT_S = 2.0  # how long save() waits for a step to end (the driver's call waits 5 s)


class SpecMismatch(ValueError):
    """A node's env is not the run's: no restart builds another (``restart`` False)."""

    restart = False


def _shown(spec: EnvironmentSpec) -> str:
    def array(a) -> str:
        return f"{a.dtype}{list(a.shape)}"

    observation = map_observation(array, spec.observation)
    if isinstance(observation, dict):
        observation = "{" + ", ".join(f"{k}: {v}" for k, v in observation.items()) + "}"
    actions = f"{spec.num_actions} actions" if spec.discrete_actions else f"actions {array(spec.action)}"
    return f"observations {observation}, {actions}, {spec.num_envs} envs"


def check_env_spec(label: str, env, spec: EnvironmentSpec) -> None:
    """Raises ``SpecMismatch`` (one line naming both) unless the vector ``env`` this node built
    has the run's ``spec`` (the driver's): an env factory that builds another env in this
    process would otherwise fail in the networks, with flax's shape errors, at every restart."""
    mine = make_environment_spec(env)
    if (mine.observation, mine.action, mine.num_actions, mine.num_envs) != (
        spec.observation,
        spec.action,
        spec.num_actions,
        spec.num_envs,
    ):
        raise SpecMismatch(
            f"{label}'s env has {_shown(mine)}; the run's (read by the driver) has {_shown(spec)}: "
            "the env (or its factory) must build the same env in every process"
        )


def summary(stopwatch: Stopwatch, wall_s: float, **figures: Any) -> dict[str, Any]:
    """A node's summary: seconds per time component, its wall time, and ``figures``."""
    return {"time_s": stopwatch.snapshot(), "wall_s": wall_s, **figures}


class ActorWorker:
    """Acts, writes to replay, reports its env steps, and stays within the run's step budget
    (``StepGrants``). A resumed actor starts from its checkpointed schedule position and RNG
    key; a restarted one (after a crash) continues its schedules from the env steps it had
    reported. It steps the one vector env it builds; ``spec`` is the run's (the driver's).
    Until the learner's first update it takes at most twice the env steps the builder needs
    before learning (``StepGrants``' pacing), then waits for the learner."""

    def __init__(
        self,
        config: ExperimentConfig,
        spec: EnvironmentSpec,
        actor_id: int,
        replay: ReplayClient,
        learner,
        counter,
        resume: dict[str, Any] | None = None,
    ) -> None:
        self._label, self._counter, self._learner = f"actor_{actor_id}", counter, learner
        # (the evaluator tells waiting from frozen by it; it beats while this actor builds and
        # compiles too: a restarted one holds its predecessor's grant until its first report)
        self._heartbeat = Heartbeat(counter, self._label)
        try:
            self._build(config, spec, actor_id, replay, learner, counter, resume)
        except BaseException:
            self._heartbeat.stop()
            raise

    def _build(
        self,
        config: ExperimentConfig,
        spec: EnvironmentSpec,
        actor_id: int,
        replay: ReplayClient,
        learner,
        counter,
        resume: dict[str, Any] | None,
    ) -> None:
        ctx = current_context()
        restarted = ctx is not None and ctx.start_count > 1
        resume = None if restarted else resume  # (a restart: the counter knows better)
        done = int(resume["env_steps"]) if resume else int(counter.get_counts().get(f"env_steps_{self._label}", 0))
        if resume:
            print(
                f"[{self._label}] resumes its schedules from its checkpoint at {done:,} env steps "
                f"(key {resume['key']})",
                flush=True,
            )
        elif done:
            print(f"[{self._label}] continues its schedules from {done:,} env steps", flush=True)
        seed = config.run.seed + 10_007 * (actor_id + 1) + done  # (a restart does not replay its episodes)
        self._env = config.make_env(
            config.env.num_envs, seed
        )  # (the run's spec is the driver's: same env id and count)
        try:
            check_env_spec(self._label, self._env, spec)
        except SpecMismatch:
            self._env.close()
            raise
        builder = config.builder
        policy = builder.make_policy(config.make_networks(spec), spec, evaluation=False)
        self._adder = builder.make_adder(replay, spec)
        source = LocalFirstSource(learner)
        print(f"[{self._label}] reads parameters {'from shared memory' if source.local else 'over RPC'}", flush=True)
        self._actor = builder.make_actor(
            jax.random.PRNGKey(seed), policy, spec, source, self._adder, env_steps_offset=done
        )
        self._pool = self_play_pool(config, learner)  # (self-play: the learner node's snapshots, mirrored)
        if self._pool is not None:
            self._env.play_against(self._pool, policy)
        if resume:
            self._actor.restore(resume)
        self._logger = make_logger(self._label, config.run.dir, terminal=False)
        self._loop = EnvironmentLoop(  # (the builder's actor, typed TrainingActor, is an Actor)
            self._env,
            cast(Actor, self._actor),
            logger=self._logger,
            label=self._label,
            overlap=config.env.actor_overlap,
        )
        # (paced until the learner's first update: StepGrants)
        head_start = 2 * max(builder.env_steps_before_learning(spec), config.env.num_envs)
        self._grants = StepGrants(
            counter, self._label, config.run.max_env_steps, config.env.num_envs, restarted, head_start
        )
        self._lock = threading.Lock()  # save() sees the schedule and key of the same step
        self._snapshot = self._actor.save()  # (taken at every report: for save() while a step blocks)
        self._started: float | None = None
        self._reported = 0  # the env steps reported to the counter

    def save(self) -> dict[str, Any]:
        """This actor's schedule position (env steps) and RNG key: now, or, while a step is held
        up (replay full, waiting on the learner), as of its last report (at most 0.5 s older)."""
        if not self._lock.acquire(timeout=SAVE_WAIT_S):
            return self._snapshot
        try:
            return self._actor.save()
        finally:
            self._lock.release()

    def timing(self) -> dict[str, Any]:
        """Seconds per component so far and the wall seconds they are of (the autoscaler's)."""
        return {
            "time_s": self._loop.stopwatch.snapshot(),
            "wall_s": time.monotonic() - self._started if self._started else 0.0,
        }

    def run(self) -> dict[str, Any]:
        """Acts until asked to stop; returns its summary. A stop while a step waits on a service
        that closes because the program ends (replay's tables closed under a write the rate
        limiter held, the counter or the learner gone) is no failure: one line in the log, and
        the summary all the same."""
        loop, self._reported, ended = self._loop, 0, False
        started = self._started = time.monotonic()
        try:
            self._act()
        except Exception as e:  # noqa: BLE001 -- raised again unless the program is ending
            if not should_stop():
                raise
            ended = True  # (the nodes it calls are stopping: no more calls to them but the adder's close)
            print(
                f"[{self._label}] stopping: its last step did not end ({failure(e)}): the program is "
                "ending; its last steps are not reported",
                flush=True,
            )
        finally:
            self._heartbeat.stop()
        wall_s = time.monotonic() - started
        if not ended:
            self._end_quietly("its last steps were not reported", self._report, self._reported, release=True)
            # a last row, so that a short run's log is not left empty (best effort: the learner may be gone)
            self._end_quietly("no last log row: the learner did not answer", self._log_staleness, loop)
        closed = self._end_quietly("replay did not take its last items", close_adder, self._adder, STOP_FLUSH_S)
        if closed is False and not ended:
            print(
                f"[{self._label}] stopping: replay did not take this actor's last items within {STOP_FLUSH_S:g}s "
                "(the table's rate limiter held them back); they are dropped",
                flush=True,
            )
        self._logger.close()
        loop.close()  # (its env's worker, if it overlaps: ended, not left to the process's exit)
        return summary(loop.stopwatch, wall_s, env_steps=loop.env_steps, steps_per_s=loop.env_steps / max(wall_s, 1e-9))

    def _act(self) -> None:
        loop, grants = self._loop, self._grants
        last = time.monotonic()
        while not should_stop():
            if grants.left == 0:
                self._reported = self._report(self._reported, ask=True)
                if grants.left == 0:  # the budget is spent (for now): the evaluator ends the run
                    send_pending(self._adder)  # (or the learner waits, for its first batch, on items gathered here)
                    time.sleep(0.05)
                    continue
            with self._lock:
                loop.step()
            grants.took()
            if time.monotonic() - last > 0.5:
                self._reported = self._report(self._reported)
                if self._pool is not None:  # (new snapshots: fetched like parameters)
                    with loop.stopwatch.time("param_fetch"):
                        self._pool.sync()
                self._snapshot = self._actor.save()
                self._log_staleness(loop)
                last = time.monotonic()

    def _end_quietly(self, what: str, call, *args: Any, **kwargs: Any) -> Any:
        """``call(*args, **kwargs)`` as this stopping actor ends: a node it calls may have
        stopped first (the program is ending), and then ``what`` is one line in the log,
        and ``None`` returned."""
        try:
            return call(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 -- an RPC to a node that stopped or failed
            print(f"[{self._label}] stopping: {what} ({failure(e)})", flush=True)
            return None

    def _log_staleness(self, loop: EnvironmentLoop) -> None:
        """A row of ``actor_<i>.csv`` with the staleness: learner updates the params this actor
        acts with are behind by (self-play: and how many snapshots its opponents draw from)."""
        version = self._actor.params_version
        pool = {"self_play_snapshots": len(self._pool.snapshots)} if self._pool is not None else {}
        loop.log(params_version=version, staleness=self._learner.version() - version, **pool)

    def _report(self, reported: int, ask: bool = False, release: bool = False) -> int:
        """Reports the env steps taken since ``reported`` (``StepGrants.report``: ``ask`` for
        the next grant, or ``release`` what is left); returns the steps reported."""
        self._grants.report(self._loop.env_steps - reported, ask, release)
        return self._loop.env_steps


def failure(error: BaseException) -> str:
    """A stopping node's log line for ``error``: ``failure_line``'s, at most 200 characters."""
    return failure_line(error, 200)


def self_play_pool(config: ExperimentConfig, learner) -> Any:
    """A self-play run's mirror of the learner node's snapshot pool (synced once; ``None`` for
    other runs): the opponents of this node's games (``shoal.envs.snapshot_pool``)."""
    if not config.multiagent.self_play:
        return None

    pool = PoolMirror(learner)
    pool.sync()
    return pool


def send_pending(adder: Adder) -> None:
    """``adder.send_pending()``: every adder has it (``core.interfaces.Adder``: nothing by
    default; a writer's ``shoal.replay.contract.ReplayWriter.send_pending``)."""
    adder.send_pending()


def close_adder(adder: Adder, timeout_s: float) -> bool:
    """Closes ``adder``, waiting at most ``timeout_s`` for replay to take what is pending
    (``Adder.close``); a plug-in adder whose ``close`` takes no ``timeout_s`` is closed as it
    closes. Returns whether everything written went in."""
    if "timeout_s" not in inspect.signature(adder.close).parameters:
        adder.close()
        return True
    return adder.close(timeout_s=timeout_s) is not False
