"""The single-process runner ``run_experiment``: the actor, an embedded Reverb server, the
learner and the evaluator in one thread of this process, paced by one rule for every agent
(``shoal.launch.experiments.learner_pacing``), with the run's directory, checkpoints and result as in
a distributed run.

Step budget: the run stops at the first vector step that reaches ``max_env_steps``, so it takes
at most ``num_envs - 1`` env steps past it (a distributed run keeps the same bound with its
actors' step grants, ``workers.StepGrants``). The result's ``env_steps`` is the count its last
checkpoint recorded (``run.json``'s ``env_steps`` and its counter's), in both runners.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, cast

import jax

from shoal.actors import EnvironmentLoop
from shoal.core.counting import Counter
from shoal.core.interfaces import Actor
from shoal.core.loggers import TerminalLogger, make_logger
from shoal.core.native_log_filter import native_log_lines_dropped
from shoal.core.notices import COMPILE_HINT, while_slow
from shoal.core.specs import EnvironmentSpec, make_environment_spec
from shoal.core.timing import Stopwatch, breakdown, process_seconds
from shoal.envs.selfplay import SnapshotPool
from shoal.launch.experiments.config import ExperimentConfig
from shoal.launch.experiments.evaluation import Evaluator, next_evaluation
from shoal.launch.experiments.formats.minari_reading import Episodes
from shoal.launch.experiments.formats.minari_recording import DatasetRecorder, check_recorded_env
from shoal.launch.experiments.interrupts import run_begins
from shoal.launch.experiments.learner_pacing import LearningActor
from shoal.launch.experiments.offline import fill_replay, is_offline, load_dataset, require_dataset, train_offline
from shoal.launch.experiments.run_directory.checkpoints import (
    Checkpointer,
    Periodic,
    commit,
    read_run,
    restore_learner,
    spec_record,
)
from shoal.launch.experiments.run_directory.claim import claim_run_directory
from shoal.launch.experiments.run_directory.self_play_pools import restore_pool, save_pool
from shoal.launch.experiments.tracking import start_tracking
from shoal.replay import make_replay_server, without_insert_blocking


def run_experiment(config: ExperimentConfig, stop: threading.Event | None = None) -> dict[str, Any]:
    """Trains in this process until solved, out of budget, or ``stop`` is set (then the result
    has ``"terminated"``: ``stop.reason``, default ``"SIGTERM"``); returns the result summary.

    With a ``run_dir`` the run owns it (a lock), checkpoints every ``checkpoint_every_s`` and at
    its end, and, with ``config.run.resume``, first restores the checkpoint found there.
    """
    start = time.monotonic()
    config.validate_settings()  # (each check once: these before the env is built, the agent's after)
    require_dataset(config)  # (bc, cql: a run needs the data)
    if config.run.resume and not config.run.dir:
        raise ValueError("resume needs a run directory")
    with contextlib.ExitStack() as stack:  # closes everything, newest first, however the run ends
        if config.replay_backend() == "reverb":  # (Reverb's C++ log lines, off the terminal as in shoal train)
            stack.enter_context(native_log_lines_dropped())
        env = config.make_env(config.env.num_envs, config.run.seed)  # (the run's one training env: its spec too)
        _closing(stack, "the environment", env.close)
        spec = make_environment_spec(env)
        config.validate_agent(spec)  # the agent's settings, and whether the budget lets it learn
        if config.run.record_dataset is not None:  # (before the run directory is written)
            check_recorded_env(config, env)
        episodes = None  # (--dataset: read and checked before anything is written; a resume's replay holds it)
        if config.run.dataset is not None and not config.run.resume:
            episodes = load_dataset(config, env, spec)
        run_dir = claim_run_directory(config, spec) if config.run.dir else None
        if run_dir is not None:
            _closing(stack, "the run directory lock", run_dir.unlock)
        tracker, result = start_tracking(config), None
        try:
            if is_offline(config.builder):
                result = train_offline(config, spec, episodes, start, stop, stack, _closing)
            else:
                result = _train(config, env, spec, start, stop, stack, episodes)
            result["process_s"] = round(process_seconds(), 3)
            if run_dir is not None:
                run_dir.write_json("result.json", result)
        finally:
            if tracker is not None:
                tracker.close(result, stop)
    return result


def _train(
    config: ExperimentConfig,
    env,
    spec: EnvironmentSpec,
    start: float,
    stop: threading.Event | None,
    stack: contextlib.ExitStack,
    episodes: Episodes | None = None,
) -> dict[str, Any]:
    builder = config.builder
    checkpointer = Checkpointer(config.run.dir) if config.run.dir else None
    networks = config.make_networks(spec)
    policy = builder.make_policy(networks, spec, evaluation=False)
    server = make_replay_server(
        without_insert_blocking(builder.make_replay_tables(spec)),
        config.replay_backend(),
        checkpoint_dir=checkpointer.replay_directory if checkpointer else None,
        seed=config.run.seed,
        gated=True,
    )
    _closing(stack, "the replay server", server.stop)  # (after its users: closed last of these)
    counter, stopwatch = Counter(), Stopwatch()  # one thread: one time breakdown
    learner_key, actor_key, eval_key = jax.random.split(jax.random.PRNGKey(config.run.seed), 3)
    learner_logger = make_logger("learner", config.run.dir, terminal=False, step_key="learner_steps")
    _closing(stack, "the learner log", learner_logger.close)
    train_logger = make_logger("train", config.run.dir, terminal=False)
    _closing(stack, "the train log", train_logger.close)
    dataset = builder.make_dataset_iterator(server.client, spec)
    learner = builder.make_learner(learner_key, networks, dataset, learner_logger, counter, server.client, stopwatch)
    _closing(stack, "the learner", learner.close)
    adder = builder.make_adder(server.client, spec)
    _closing(stack, "the adder", adder.close)
    recorder = None
    if config.run.record_dataset is not None:  # (the actor's episodes, as a Minari dataset at the end)
        recorder = DatasetRecorder(adder, config, env, config.env.num_envs)
        _closing(stack, "the dataset recording", recorder.discard)  # (kept by finish; a failed run leaves none)
        adder = recorder
    actor = builder.make_actor(actor_key, policy, spec, learner, adder, asynchronous_updates=False)
    evaluator = Evaluator(config, learner, eval_key, start, stopwatch, stop.is_set if stop is not None else None)
    _closing(stack, "the evaluator", evaluator.close)
    pool = _self_play(config, env, evaluator, policy, learner)
    resumed = _resume(config, learner, counter, actor, evaluator, server, pool) if config.run.resume else None
    # (offline-to-online: replay seeded with the dataset before the actor's first step)
    seeded = fill_replay(builder, server.client, spec, episodes) if episodes is not None else None
    compiling = (
        functools.partial(while_slow, "compiling the learner's update", sys.stderr, hint=COMPILE_HINT)
        if config.tracking.progress
        else contextlib.nullcontext
    )
    loop = EnvironmentLoop(
        env,
        LearningActor(
            cast(Actor, actor),  # (the builder's actor, typed TrainingActor, is an Actor)
            learner,
            server,
            dataset.table,
            dataset.items_per_update,
            pull_after=builder.on_policy,
            first_update=compiling,
        ),
        counter,
        train_logger,
        stopwatch,
        # (auto: a one-process run's env steps on its thread, the run it always was; the learner's update shares it)
        overlap="off" if config.env.actor_overlap == "auto" else config.env.actor_overlap,
    )
    _closing(stack, "the env's worker", loop.close)
    loop.env_steps = int(counter.get_counts().get("env_steps", 0))
    progress = (
        TerminalLogger("train", time_delta=config.tracking.progress_every_s) if config.tracking.progress else None
    )
    due = Periodic(config.run.checkpoint_every_s)

    def checkpoint() -> None:  # (called only where there is a run dir, and so a checkpointer)
        written = cast(Checkpointer, checkpointer).save(loop.env_steps, learner, server.client)
        if pool is not None:  # (its own file per checkpoint, named in run.json: committed with the rest)
            written["self_play_pool"] = save_pool(pool, cast(str, config.run.dir), written)
        commit(
            cast(str, config.run.dir),
            written,
            loop.env_steps,
            agent=builder.name,
            spec=spec_record(spec),
            counter=counter.save(),
            evaluator=evaluator.save(),
            actors={"actor": actor.save()},
        )
        due.reset()

    last_log = time.monotonic()
    run_begins()  # (a signal before the first step ends the process: nothing to save yet; see interrupts)
    first_step_s = None
    while loop.env_steps < config.run.max_env_steps and not (stop is not None and stop.is_set()):
        loop.step()
        if pool is not None:
            pool.maybe_add(learner)
        if first_step_s is None:
            first_step_s = process_seconds()  # (the start a user waits through: command to first step)
        if evaluator.due(loop.env_steps) and evaluator.run(loop.env_steps):
            break
        if checkpointer is not None and due.due():
            checkpoint()
        if time.monotonic() - last_log >= 1.0:
            last_log = time.monotonic()
            last = evaluator.last_return
            row = loop.log(eval_return=last if last is not None else float("nan"))
            if progress:
                progress.write(
                    {
                        k: row[k]
                        for k in ("env_steps", "steps_per_s", "learner_steps", "episode_return", "eval_return")
                        if k in row
                    }
                )
    terminated = stop is not None and stop.is_set()
    if not terminated and not evaluator.solved and evaluator.last_at != loop.env_steps:
        evaluator.run(loop.env_steps)  # the budget ran out between evaluations
    learner.check_finite()  # the last update too
    wall_s = time.monotonic() - start  # (the run's result is settled: the last checkpoint is not in it)
    if checkpointer is not None:
        checkpoint()
    loop.log(eval_return=evaluator.last_return)
    result = evaluator.result(loop.env_steps, counter.get_counts().get("learner_steps", 0), wall_s)
    if recorder is not None:
        result["record_dataset"] = recorder.finish()
    result["time_breakdown"] = {"process": breakdown(stopwatch.seconds, wall_s)}
    if first_step_s is not None:
        result["first_step_s"] = round(first_step_s, 3)
    if resumed is not None:
        result["resumed_from"] = resumed
    if seeded is not None:
        result["dataset"] = {"path": config.run.dataset, **seeded}
    if pool is not None:
        result["self_play_pool"] = pool.versions
    if terminated:  # (the signal that stopped it: an interrupts.StopRequest names it)
        result["terminated"] = getattr(stop, "reason", "SIGTERM")
    return result


def _self_play(config: ExperimentConfig, env, evaluator, policy, learner) -> Any:
    """A self-play run's snapshot pool (``shoal.envs.selfplay``), its first snapshot taken, that
    the training env's and the evaluator's opponents play; ``None`` for other runs."""
    if not config.multiagent.self_play:
        return None

    pool = SnapshotPool(config.multiagent.self_play_pool, config.multiagent.self_play_every)
    pool.maybe_add(learner)
    env.play_against(pool, policy)
    evaluator.play_against(pool, policy)
    return pool


def _resume(config: ExperimentConfig, learner, counter, actor, evaluator, server, pool=None) -> dict[str, Any]:
    """Restores the run's checkpoint (replay restored itself when its server started)."""
    saved = cast("dict[str, Any]", read_run(cast(str, config.run.dir)))  # (resumed: its run.json, checked)
    if "actor" not in saved["actors"]:
        raise ValueError(
            f"{config.run.dir}/checkpoints/run.json: actors must hold the one actor of a "
            f"single-process run, got {', '.join(saved['actors']) or 'none'}"
        )
    restored_digest = restore_learner(cast(str, config.run.dir), learner, saved)
    counter.restore(saved["counter"])
    actor.restore(saved["actors"]["actor"])
    actor.update(wait=True)  # (its first step acts with the restored params, not the initial ones)
    if saved["evaluator"] is not None:  # (None: a checkpoint of an earlier version without one; afresh)
        evaluator.restore(saved["evaluator"])
    if pool is not None:  # (the pool its checkpoint saved)
        restore_pool(pool, cast(str, config.run.dir), saved, learner.get_variables()[1])
    replay_items = {name: int(info.current_size) for name, info in server.client.server_info().items()}
    info = {
        "env_steps": saved["env_steps"],
        "learner_version": saved["learner_version"],
        "learner_digest": restored_digest,
        "replay_items": replay_items,
        "actor_env_steps": actor.save()["env_steps"],
        "actor_key": actor.save()["key"],
        "next_eval_at": evaluator.save()["next"],
        "num_evals": evaluator.num_evals,
    }
    tables = ", ".join(f"{items:,} items in '{name}'" for name, items in replay_items.items())
    print(
        f"shoal: resumed {config.run.dir} at env step {saved['env_steps']:,}: learner version "
        f"{saved['learner_version']} (state {restored_digest}), replay {tables} (an item is one write of the "
        f"agent's adder), actor schedule at {saved['actors']['actor']['env_steps']:,} env steps, "
        f"{next_evaluation(evaluator.save()['next'], saved['env_steps'])}",
        file=sys.stderr,
        flush=True,
    )
    return info


DISK_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def _closing(stack: contextlib.ExitStack, what: str, close: Callable[[], object]) -> None:
    """Registers ``close`` with ``stack``: a failure does not skip the rest. A full disk is
    raised (after everything else closed) unless an error is already on its way out; other
    failures are reported as warnings."""

    def quietly() -> None:
        try:
            close()
        except OSError as e:
            if e.errno in DISK_FULL and sys.exc_info()[1] is None:
                raise
            print(f"shoal: warning: could not close {what}: {type(e).__name__}: {e}", file=sys.stderr)
        except Exception as e:  # noqa: BLE001
            print(f"shoal: warning: could not close {what}: {type(e).__name__}: {e}", file=sys.stderr)

    stack.callback(quietly)
