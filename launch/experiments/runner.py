"""The single-process runner ``run_experiment``.

In one process the actor, an embedded Reverb server and the learner share one thread, paced by
one rule for every agent and table (after Acme's runner): inserts never block (the tables'
rate limiters are rebuilt without an insert bound), and after each vector step the learner
takes its next batch if it is waiting, and goes on stepping while the table could serve yet
another batch (it lags behind the rate limiter; the runner waits the moment the prefetch thread
needs to deliver it). So a replay ratio (a ``SampleToInsertRatio`` table) and an on-policy
queue pace the same way, and updates spread out between actor steps instead of bunching.

Actor parameters come from the learner object itself, pulled synchronously, so a seeded run
acts reproducibly. An ``on_policy`` agent pulls after the learner stepped (every rollout is
acted with the newest params); any other agent pulls before, so the update it dispatches runs
on the devices while the actor takes its next vector step (acting one update behind).
"""

from __future__ import annotations

import errno
import os
import sys
import threading
import time
from typing import Any, Callable, Mapping

import jax
import numpy as np

from shoal.actors import EnvironmentLoop, make_vector_env
from shoal.core.counting import Counter
from shoal.core.interfaces import Actor, Learner
from shoal.core.loggers import TerminalLogger, make_logger
from shoal.core.specs import make_environment_spec
from shoal.core.timing import breakdown
from shoal.core.types import Step
from shoal.launch.experiments.checkpointing import (Checkpointer, keep_only_replay_checkpoint, read_run,
                                                    restore_learner)
from shoal.launch.experiments.config import ExperimentConfig
from shoal.launch.experiments.evaluation import Evaluator
from shoal.launch.experiments.rundir import RunDirectory, write_json
from shoal.replay import ReplayServer, without_insert_blocking


class LearningActor(Actor):
    """An actor whose ``update`` steps the learner while data is ready (the pacing rule in the
    module docstring) and refreshes the actor's parameters: after that if ``pull_after``,
    else before. The learner reads ``items_per_update`` items of ``table`` per step."""

    def __init__(self, actor: Actor, learner: Learner, server: ReplayServer, table: str,
                 items_per_update: int, pull_after: bool, timeout_s: float = 120.0) -> None:
        self._actor, self._learner, self._server, self._table = actor, learner, server, table
        self._items_per_update, self._pull_after, self._timeout_s = items_per_update, pull_after, timeout_s
        self._items_consumed = 0

    def _behind(self) -> bool:
        """Whether the table can serve another batch now, or (for an on-policy agent, which must
        not act before training on it) already served one that is on its way to the learner."""
        if self._server.can_sample(self._table, self._items_per_update):
            return True
        return self._pull_after and (
            self._server.items_sampled(self._table) >= self._items_consumed + self._items_per_update)

    def select_action(self, observation: np.ndarray) -> tuple[np.ndarray, Mapping[str, np.ndarray]]:
        return self._actor.select_action(observation)

    def observe(self, step: Step) -> None:
        self._actor.observe(step)

    def _train(self) -> None:
        stepped, waiting_since = False, None
        while True:
            behind = self._behind()
            if self._learner.ready() and (behind or not stepped):
                self._learner.step()
                self._items_consumed += self._items_per_update
                stepped, waiting_since = True, None
            elif not behind:
                return
            elif waiting_since is None:
                waiting_since = time.monotonic()
            elif time.monotonic() - waiting_since > self._timeout_s:
                raise TimeoutError(f"replay table '{self._table}' could serve a batch, but none "
                                   f"reached the learner within {self._timeout_s}s")
            else:
                with self._learner.stopwatch.time("sample_wait"):
                    time.sleep(0.0002)  # the learner's prefetch thread is fetching the batch

    def update(self, wait: bool = False) -> None:
        if self._pull_after:
            self._train()
            self._actor.update(wait)
        else:
            self._actor.update(wait)
            self._train()


def run_experiment(config: ExperimentConfig, stop: threading.Event | None = None) -> dict[str, Any]:
    """Trains in this process until solved, out of budget, or ``stop`` is set (then the result
    has ``"terminated": "SIGTERM"``); returns the result summary.

    With a ``run_dir`` the run owns it (a lock), checkpoints every ``checkpoint_every_s`` and at
    its end, and, with ``config.resume``, first restores the checkpoint found there.
    """
    start = time.monotonic()
    config.validate()
    env = make_vector_env(config.env_id, config.num_envs, config.seed)
    closers: list[tuple[str, Callable[[], None]]] = [("the environment", env.close)]
    try:
        spec = make_environment_spec(env)
        config.validate(spec)  # the agent's settings, and whether the budget lets it learn
        run_dir = _claim(config)
        if run_dir is not None:
            closers.insert(0, ("the run directory lock", run_dir.unlock))  # released last
        result = _train(config, env, spec, run_dir, start, stop, closers)
        if run_dir is not None:
            write_json(run_dir.file("result.json"), result)
    finally:
        _close(closers)
    return result


def _claim(config: ExperimentConfig) -> RunDirectory | None:
    if not config.run_dir:
        if config.resume:
            raise ValueError("resume needs a run directory")
        return None
    return claim_run_directory(config)


def claim_run_directory(config: ExperimentConfig, launch: dict[str, Any] | None = None) -> RunDirectory:
    """Locks the run directory (one live run per directory); a fresh run refuses a directory
    that holds another run's checkpoints and writes its ``config.json`` (with ``launch``, how
    it was launched), a resumed one needs a checkpoint there."""
    run_dir = RunDirectory(config.run_dir).lock()
    try:
        saved = read_run(config.run_dir)
        if config.resume and saved is None:
            raise ValueError(f"run directory {config.run_dir!r} holds no checkpoint to resume")
        if config.resume:  # Reverb loads its latest checkpoint: make that the one run.json names
            keep_only_replay_checkpoint(os.path.join(config.run_dir, "checkpoints"), saved.get("replay_checkpoint"))
        if not config.resume and saved is not None:
            raise ValueError(f"run directory {config.run_dir!r} holds the checkpoints of an earlier run; "
                             "continue it with --resume, or choose another --run-dir")
        if not config.resume:
            write_json(run_dir.file("config.json"), {**config.to_dict(), "launch": launch})
    except BaseException:
        run_dir.unlock()
        raise
    return run_dir


def _train(config: ExperimentConfig, env, spec, run_dir: RunDirectory | None, start: float,
           stop: threading.Event | None, closers: list) -> dict[str, Any]:
    builder = config.builder
    checkpointer = Checkpointer(config.run_dir, config.checkpoint_every_s) if run_dir else None
    networks = config.make_networks(spec)
    policy = builder.make_policy(networks, spec, evaluation=False)
    server = ReplayServer(without_insert_blocking(builder.make_replay_tables(spec, policy)),
                          checkpoint_dir=checkpointer.replay_directory if checkpointer else None)
    closers.insert(1 if run_dir else 0, ("the replay server", server.stop))  # after its users
    counter = Counter()
    learner_key, actor_key, eval_key = jax.random.split(jax.random.PRNGKey(config.seed), 3)
    learner_logger = make_logger("learner", config.run_dir, terminal=False, step_key="learner_steps")
    train_logger = make_logger("train", config.run_dir, terminal=False)
    closers += [("the learner log", learner_logger.close), ("the train log", train_logger.close)]
    dataset = builder.make_dataset_iterator(server.client, spec)
    learner = builder.make_learner(learner_key, networks, dataset, learner_logger, counter, server.client)
    adder = builder.make_adder(server.client, spec, policy)
    closers += [("the learner", learner.close), ("the adder", adder.close)]
    actor = builder.make_actor(actor_key, policy, spec, learner, adder, asynchronous_updates=False)
    evaluator = Evaluator(config, learner, eval_key, start)
    closers.append(("the evaluator", evaluator.close))
    resumed = _resume(config, checkpointer, learner, counter, actor, evaluator, server) if config.resume else None
    loop = EnvironmentLoop(env, LearningActor(actor, learner, server, dataset.table, dataset.items_per_update,
                                              pull_after=builder.on_policy), counter, train_logger)
    loop.env_steps = int(counter.get_counts().get("env_steps", 0))
    learner.stopwatch = evaluator.stopwatch = loop.stopwatch  # one thread: one time breakdown
    progress = TerminalLogger("train", time_delta=config.progress_every_s) if config.progress else None

    def checkpoint() -> None:
        checkpointer.save(loop.env_steps, learner, server.client, counter=counter.save(),
                          evaluator=evaluator.save(), actor=actor.save())

    last_log = time.monotonic()
    while loop.env_steps < config.max_env_steps and not (stop is not None and stop.is_set()):
        loop.step()
        if evaluator.due(loop.env_steps) and evaluator.run(loop.env_steps):
            break
        if checkpointer is not None and checkpointer.due():
            checkpoint()
        if time.monotonic() - last_log >= 1.0:
            last_log = time.monotonic()
            last = evaluator.last_return
            row = loop.log(eval_return=last if last is not None else float("nan"))
            if progress:
                progress.write({k: row[k] for k in ("env_steps", "steps_per_s", "learner_steps",
                                                    "episode_return", "eval_return") if k in row})
    terminated = stop is not None and stop.is_set()
    if not terminated and not evaluator.solved and evaluator.last_at != loop.env_steps:
        evaluator.run(loop.env_steps)  # the budget ran out between evaluations
    learner.check_finite()  # the last update too
    wall_s = time.monotonic() - start  # (the run's result is settled: the last checkpoint is not in it)
    if checkpointer is not None:
        checkpoint()
    loop.log(eval_return=evaluator.last_return)
    result = evaluator.result(loop.env_steps, counter.get_counts().get("learner_steps", 0), wall_s)
    result["time_breakdown"] = {"process": breakdown(loop.stopwatch.seconds, wall_s)}
    if resumed is not None:
        result["resumed_from"] = resumed
    if terminated:
        result["terminated"] = "SIGTERM"
    return result


def _resume(config: ExperimentConfig, checkpointer: Checkpointer, learner, counter, actor, evaluator,
            server: ReplayServer) -> dict[str, Any]:
    """Restores the run's checkpoint (replay restored itself when its server started)."""
    saved = read_run(config.run_dir)
    restored_digest = restore_learner(config.run_dir, learner, saved)
    counter.restore(saved["counter"])
    actor.restore(saved["actor"])
    evaluator.restore(saved["evaluator"])
    replay_items = {name: int(info.current_size) for name, info in server.client.server_info().items()}
    info = {"env_steps": saved["env_steps"], "learner_version": saved["learner_version"],
            "learner_digest": restored_digest, "replay_items": replay_items,
            "actor_env_steps": actor.save()["env_steps"], "actor_key": actor.save()["key"],
            "next_eval_at": evaluator.save()["next"], "num_evals": evaluator.num_evals}
    print(f"shoal: resumed {config.run_dir} at env step {saved['env_steps']:,}: learner version "
          f"{saved['learner_version']} (state {restored_digest}), replay items {replay_items}, "
          f"actor schedule at {saved['actor']['env_steps']:,} env steps, next evaluation at "
          f"{saved['evaluator']['next']:,}", file=sys.stderr, flush=True)
    return info


def _close(closers: list[tuple[str, Callable[[], None]]]) -> None:
    """Closes everything, newest first; a failure does not skip the rest. A full disk is raised
    once everything is closed (unless an error is already on its way out); other failures are
    reported as warnings."""
    disk_full, failing = None, sys.exc_info()[1] is not None
    for what, close in reversed(closers):
        try:
            close()
        except OSError as e:
            if e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
                disk_full = disk_full or e
            else:
                print(f"shoal: warning: could not close {what}: {type(e).__name__}: {e}", file=sys.stderr)
        except Exception as e:  # noqa: BLE001
            print(f"shoal: warning: could not close {what}: {type(e).__name__}: {e}", file=sys.stderr)
    if disk_full is not None and not failing:
        raise disk_full
