"""``make_distributed_program``: any agent builder as a program of replay, counter, learner,
N actors and an evaluator, for ``launch(program, "processes" | "inprocess" | "ray")``.

* ``replay``  -- a Reverb server with the builder's tables.
* ``counter`` -- a ``Counter`` service; actors add ``env_steps``, the learner ``learner_steps``
  (and ``stale_batches_dropped``, for an on-policy agent whose batches lag too far).
* ``learner`` -- steps the builder's learner as fast as the table's rate limiter allows and
  serves ``get_variables`` (its cached host copy, with a version) over RPC.
* ``actor_i`` -- (group ``actor``, restartable, scalable while running) steps its own vector env, writes to replay, pulls
  parameters asynchronously every ``variable_update_period`` steps, and logs its steps/s and its
  staleness (learner version minus the version it acts with).
* ``evaluator`` -- evaluates every ``eval_every`` env steps (counted over all actors) and returns
  the run's result when the target return is reached, the step budget is spent, or the program
  is asked to stop (then ``"stopped": true``), which ends the program: it is also the
  step-budget stopper. ``first_update_s`` in the result: launch to the learner's first update.
"""

from __future__ import annotations

import functools
import json
import os
import time
from typing import Any

import jax

from shoal.actors import EnvironmentLoop, make_vector_env
from shoal.core.counting import Counter
from shoal.core.loggers import make_logger
from shoal.core.specs import make_environment_spec
from shoal.core.timing import breakdown
from shoal.launch.experiments.evaluation import Evaluator
from shoal.launch.experiments.checkpointing import Checkpointer, read_run, restore_learner
from shoal.launch.experiments.config import ExperimentConfig
from shoal.launch.experiments.rundir import write_json
from shoal.launch.experiments.shared_params import LocalFirstSource, ParamsPublisher
from shoal.launch.programs.nodes import FunctionNode, ReplayNode, ServiceNode, should_stop
from shoal.launch.programs.program import Program

# Actors act on the CPU with one thread each; the learner keeps the accelerators.
ACTOR_ENV = {"JAX_PLATFORMS": "cpu", "CUDA_VISIBLE_DEVICES": "",
             "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"}


class LearnerWorker:
    """Trains, serves parameters, and checkpoints the run (learner, replay and counter) every
    ``checkpoint_every_s`` and when it stops; on resume it starts from that checkpoint."""

    def __init__(self, config: ExperimentConfig, replay, counter) -> None:
        self._counter, self._replay = counter, replay
        spec = config.environment_spec()
        builder = config.builder
        self._local = Counter()
        logger = make_logger("learner", config.run_dir, terminal=False, step_key="learner_steps")
        dataset = builder.make_dataset_iterator(replay, spec)
        self._learner = builder.make_learner(jax.random.PRNGKey(config.seed), config.make_networks(spec),
                                             dataset, logger, self._local, replay)
        self._checkpointer = Checkpointer(config.run_dir, config.checkpoint_every_s) if config.run_dir else None
        self._resumed: dict[str, Any] | None = None
        if config.resume:
            saved = read_run(config.run_dir)
            self._local.restore({k: v for k, v in saved["counter"].items() if k == "learner_steps"})
            self._resumed = {"env_steps": saved["env_steps"], "learner_version": saved["learner_version"],
                             "learner_digest": restore_learner(config.run_dir, self._learner, saved),
                             "replay_items": _replay_items(replay),
                             "checkpoint_replay_items": saved.get("replay_items"),
                             "checkpoint_replay_items_range": saved.get("replay_items_range")}
            print(f"[learner] resumed at env step {saved['env_steps']:,}: {self._resumed}", flush=True)
        # Compile before this node serves (actors and the evaluator wait for it), so the first
        # batches are trained on at once rather than after the compiler (seconds on a CPU).
        self._learner.warm_up(dataset.example())
        self._first_update_at: float | None = None
        self._params = ParamsPublisher(self._learner)  # for nodes on this host: no RPC copy per fetch
        self._started_at: float | None = None

    def resumed(self) -> dict[str, Any] | None:
        """What was restored when the run resumed (``None`` for a fresh run)."""
        return self._resumed

    def _checkpoint(self) -> None:
        counts = self._counter.get_counts()
        self._checkpointer.save(int(counts.get("env_steps", 0)), self._learner, self._replay,
                                counter={**counts, **self._local.get_counts()})

    def get_variables(self, known_version: int = -1):
        return self._learner.get_variables(known_version)

    def shared_params(self) -> dict[str, str] | None:
        """Where this host's nodes read the parameters from shared memory (``None``: use RPC)."""
        return self._params.location()

    def version(self) -> int:
        return self._learner.version

    def counts(self) -> dict[str, float]:
        """The learner's own totals (``learner_steps``, ...), exact, not the last report, and
        ``first_update_at`` (Unix time of its first update, if any)."""
        counts = self._local.get_counts()
        if self._first_update_at is not None:
            counts["first_update_at"] = self._first_update_at
        if self._started_at is not None:  # where its time went (seconds), for the time breakdown
            counts.update({f"time_s/learner/{k}": v for k, v in self._learner.stopwatch.snapshot().items()})
            counts["time_s/learner/wall"] = time.monotonic() - self._started_at
        return counts

    def run(self) -> None:
        reported = self._local.get_counts()  # (a resumed counter already holds the restored totals)
        last = self._started_at = time.monotonic()
        waiting = self._learner.stopwatch.time("sample_wait")
        try:
            while not should_stop():
                if not self._learner.ready():  # the rate limiter holds sampling back: wait for actors
                    with waiting:
                        time.sleep(0.001)
                    continue
                self._learner.step()
                if self._first_update_at is None:
                    self._first_update_at = time.time()
                if time.monotonic() - last > 0.5:  # learner_steps, stale_batches_dropped, ...
                    counts = self._local.get_counts()
                    self._counter.increment(**{k: v - reported.get(k, 0) for k, v in counts.items()})
                    reported, last = counts, time.monotonic()
                if self._checkpointer is not None and self._checkpointer.due():
                    self._checkpoint()
        finally:
            try:
                self._learner.check_finite()
                if self._checkpointer is not None and should_stop():  # asked to stop: save first
                    self._checkpoint()
            finally:
                self._params.close()
                self._learner.close()


class ActorWorker:
    """Acts, writes to replay, reports its env steps. A restarted (or resumed) actor continues
    its schedules (e.g. epsilon) from the steps it had reported."""

    def __init__(self, config: ExperimentConfig, actor_id: int, replay, learner, counter) -> None:
        self._id, self._counter, self._learner = actor_id, counter, learner
        done = int(counter.get_counts().get(f"env_steps_actor_{actor_id}", 0))
        if done:
            print(f"[actor_{actor_id}] continues its schedules from {done:,} env steps", flush=True)
        seed = config.seed + 10_007 * (actor_id + 1) + done  # (a restart does not replay its episodes)
        self._env = make_vector_env(config.env_id, config.num_envs, seed)
        spec = make_environment_spec(self._env)
        builder = config.builder
        policy = builder.make_policy(config.make_networks(spec), spec, evaluation=False)
        self._adder = builder.make_adder(replay, spec, policy)
        source = LocalFirstSource(learner)
        print(f"[actor_{actor_id}] reads parameters {'from shared memory' if source.local else 'over RPC'}", flush=True)
        self._actor = builder.make_actor(jax.random.PRNGKey(seed), policy, spec, source, self._adder,
                                         env_steps_offset=done)
        self._logger = make_logger(f"actor_{actor_id}", config.run_dir, terminal=False)

    def run(self) -> None:
        loop = EnvironmentLoop(self._env, self._actor, logger=self._logger)
        reported, last = 0, time.monotonic()

        node, seconds, clock = f"actor_{self._id}", {}, time.monotonic()

        def report() -> None:  # env steps, and where this actor's time went since the last report
            nonlocal reported, seconds, clock
            delta, reported = loop.env_steps - reported, loop.env_steps
            now, times = time.monotonic(), loop.stopwatch.snapshot()
            spent = {f"time_s/{node}/{k}": v - seconds.get(k, 0.0) for k, v in times.items()}
            self._counter.increment(**{"env_steps": delta, f"env_steps_{node}": delta, **spent,
                                       f"time_s/{node}/wall": now - clock})
            seconds, clock = times, now

        while not should_stop():
            loop.step()
            if time.monotonic() - last > 0.5:
                report()
                # staleness: learner updates the params this actor acts with are behind by
                version = self._actor.params_version
                loop.log(params_version=version, staleness=self._learner.version() - version)
                last = time.monotonic()
        report()  # an actor stopped while the program goes on (scaled down): its last steps count
        self._adder.close()
        self._logger.close()


def run_evaluator(config: ExperimentConfig, learner, counter, launched_at: float | None = None) -> dict[str, Any]:
    """Evaluates on schedule; returns the run's result when the target return is reached, the
    budget is spent, or the program is asked to stop (ending the program). ``wall_s`` counts
    from ``launched_at`` (Unix time, e.g. when ``shoal train`` started), else from here; actor
    speeds are measured over this node's own run (after every node started)."""
    start, start_unix = time.monotonic(), time.time()
    evaluator = Evaluator(config, LocalFirstSource(learner), jax.random.PRNGKey(config.seed + 1), start)
    schedule = os.path.join(config.run_dir, "checkpoints", "evaluator.json") if config.run_dir else None
    if config.resume and schedule and os.path.exists(schedule):
        with open(schedule) as f:
            evaluator.restore(json.load(f))
    progress = make_logger("train", None, terminal=config.progress, time_delta=config.progress_every_s)
    first = counter.get_counts()
    while not should_stop():
        counts = counter.get_counts()
        env_steps = int(counts.get("env_steps", 0))
        out_of_budget = env_steps >= config.max_env_steps
        last = evaluator.last_return
        progress.write({"env_steps": env_steps, "steps_per_s": env_steps / (time.monotonic() - start),
                        "learner_steps": int(counts.get("learner_steps", 0)),
                        "eval_return": last if last is not None else float("nan")})
        if evaluator.due(env_steps) or out_of_budget:
            solved = evaluator.run(env_steps)
            if schedule:
                os.makedirs(os.path.dirname(schedule), exist_ok=True)
                write_json(schedule, evaluator.save())
            if solved or out_of_budget:
                break
        time.sleep(0.05)
    window_s = time.monotonic() - start
    wall_s = time.time() - (launched_at or start_unix)
    counts = {**counter.get_counts(), **learner.counts()}  # the learner's own, not its last report
    evaluator.close()
    per_actor = {name.removeprefix("env_steps_"): (steps - first.get(name, 0)) / window_s
                 for name, steps in counts.items() if name.startswith("env_steps_actor_")}
    times = node_breakdowns(counts)
    times["evaluator"] = breakdown(evaluator.stopwatch.seconds, window_s)
    result = {**evaluator.result(counts.get("env_steps", 0), counts.get("learner_steps", 0), wall_s),
              "time_breakdown": times,
              "num_actors": len(per_actor), "actor_steps_per_s": round(sum(per_actor.values()), 1),
              "actor_steps_per_s_each": {k: round(v, 1) for k, v in per_actor.items()}}
    if "stale_batches_dropped" in counts:  # on-policy agents: batches older than max_policy_lag
        result["stale_batches_dropped"] = int(counts["stale_batches_dropped"])
    if "first_update_at" in counts:
        result["first_update_s"] = round(counts["first_update_at"] - (launched_at or start_unix), 3)
    if config.resume:
        result["resumed_from"] = learner.resumed()
    if should_stop():
        result["stopped"] = True
    return result


def node_breakdowns(counts: dict[str, float]) -> dict[str, dict[str, float]]:
    """``{node: {component: share of the node's wall time}}`` from the ``time_s/<node>/<component>``
    seconds (and ``time_s/<node>/wall``) that nodes report."""
    seconds: dict[str, dict[str, float]] = {}
    for key, value in counts.items():
        if key.startswith("time_s/"):
            _, node, component = key.split("/", 2)
            seconds.setdefault(node, {})[component] = value
    return {node: breakdown({k: v for k, v in spent.items() if k != "wall"}, spent.get("wall", 0.0))
            for node, spent in sorted(seconds.items()) if spent.get("wall")}


def make_distributed_program(config: ExperimentConfig, num_actors: int = 4,
                             launched_at: float | None = None) -> Program:
    """The program graph for ``config`` (validated first: bad settings raise here, before launch).
    ``launched_at``: Unix time the run counts its ``wall_s`` from (default: the evaluator's start)."""
    config.validate()
    if num_actors < 1:
        raise ValueError(f"num_actors must be >= 1, got {num_actors}")
    spec = config.environment_spec()
    builder = config.builder
    builder.validate(spec, jax.local_device_count())
    policy = builder.make_policy(config.make_networks(spec), spec, evaluation=False)
    program = Program(builder.name)
    checkpoints = os.path.join(config.run_dir, "checkpoints") if config.run_dir else None
    replay = program.add_node(ReplayNode(functools.partial(builder.make_replay_tables, spec, policy),
                                         checkpoint_dir=checkpoints and os.path.join(checkpoints, "replay")),
                              label="replay")  # (a replay node restores the checkpoint it finds)
    # Each service serves what its clients call, no more (e.g. no remote Counter.restore).
    counter = program.add_node(ServiceNode(_counter, config.run_dir if config.resume else None,
                                           methods=("increment", "get_counts")), label="counter")
    learner = program.add_node(ServiceNode(LearnerWorker, config, replay, counter,
                                           methods=("get_variables", "shared_params", "version", "counts", "resumed")),
                               label="learner")
    program.add_group("actor", functools.partial(_actor_node, config, replay, learner, counter), num_actors)
    program.add_node(FunctionNode(run_evaluator, config, learner, counter, launched_at), label="evaluator")
    return program


def _counter(resumed_run_dir: str | None) -> Counter:
    """The run's counter: restored from the checkpoint when the run resumes."""
    counter = Counter()
    if resumed_run_dir is not None:
        counter.restore(read_run(resumed_run_dir)["counter"])
    return counter


def _replay_items(replay) -> dict[str, int]:
    return {name: int(info.current_size) for name, info in replay.server_info().items()}


def _actor_node(config: ExperimentConfig, replay, learner, counter, index: int) -> ServiceNode:
    return ServiceNode(ActorWorker, config, index, replay, learner, counter, methods=())  # nobody calls it
