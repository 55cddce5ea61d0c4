"""An offline agent's run (``bc``, ``cql``): replay filled once from the dataset
(``filling.fill_replay``), then learner updates, evaluations and checkpoints on the learner's
clock -- ``max_env_steps`` and ``eval_every`` count SGD steps (``shoal.launch.experiments.offline``).
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from typing import Any, cast

import jax

from shoal.core.counting import Counter
from shoal.core.loggers import TerminalLogger, make_logger
from shoal.core.specs import EnvironmentSpec
from shoal.core.timing import Stopwatch, breakdown
from shoal.launch.experiments.evaluation import Evaluator
from shoal.launch.experiments.formats.minari_reading import Episodes
from shoal.launch.experiments.interrupts import run_begins
from shoal.launch.experiments.offline.filling import fill_replay
from shoal.launch.experiments.run_directory.checkpoints import (
    Checkpointer,
    Periodic,
    commit,
    read_run,
    restore_learner,
    spec_record,
)
from shoal.replay import make_replay_server, without_insert_blocking


def train_offline(
    config: Any,
    spec: EnvironmentSpec,
    episodes: Episodes | None,
    start: float,
    stop: threading.Event | None,
    stack: contextlib.ExitStack,
    closing: Any,
) -> dict[str, Any]:
    """An offline agent's run: replay filled from ``episodes`` (``None``: a resume, whose replay
    checkpoint restored it), then learner updates, evaluations and checkpoints on the learner's
    clock (module docstring); returns the result, as ``run_experiment``'s."""
    builder = config.builder
    checkpointer = Checkpointer(config.run.dir) if config.run.dir else None
    networks = config.make_networks(spec)
    server = make_replay_server(
        without_insert_blocking(builder.make_replay_tables(spec)),
        config.replay_backend(),
        checkpoint_dir=checkpointer.replay_directory if checkpointer else None,
        seed=config.run.seed,
        gated=True,
    )
    closing(stack, "the replay server", server.stop)
    counter, stopwatch = Counter(), Stopwatch()
    learner_key, _, eval_key = jax.random.split(jax.random.PRNGKey(config.run.seed), 3)
    learner_logger = make_logger("learner", config.run.dir, terminal=False, step_key="learner_steps")
    closing(stack, "the learner log", learner_logger.close)
    dataset = builder.make_dataset_iterator(server.client, spec)
    learner = builder.make_learner(learner_key, networks, dataset, learner_logger, counter, server.client, stopwatch)
    closing(stack, "the learner", learner.close)
    evaluator = Evaluator(config, learner, eval_key, start, stopwatch, stop.is_set if stop is not None else None)
    closing(stack, "the evaluator", evaluator.close)
    filled = None
    if config.run.resume:
        saved = cast("dict[str, Any]", read_run(cast(str, config.run.dir)))
        restore_learner(cast(str, config.run.dir), learner, saved)
        counter.restore(saved["counter"])
        if saved["evaluator"] is not None:
            evaluator.restore(saved["evaluator"])
        print(f"shoal: resumed {config.run.dir} at learner step {saved['env_steps']:,}", file=sys.stderr, flush=True)
    else:
        with stopwatch.time("replay_insert"):
            filled = fill_replay(builder, server.client, spec, cast(Episodes, episodes))

    def steps() -> int:
        return int(counter.get_counts().get("learner_steps", 0))

    def checkpoint() -> None:
        written = cast(Checkpointer, checkpointer).save(steps(), learner, server.client)
        commit(
            cast(str, config.run.dir),
            written,
            steps(),
            agent=builder.name,
            spec=spec_record(spec),
            counter=counter.save(),
            evaluator=evaluator.save(),
            actors={},
        )
        due.reset()

    progress = (
        TerminalLogger("train", time_delta=config.tracking.progress_every_s) if config.tracking.progress else None
    )
    due, last_log, consumed = Periodic(config.run.checkpoint_every_s), time.monotonic(), 0
    items = dataset.items_per_update
    run_begins()  # (from here SIGTERM / Ctrl-C stop the run at its next step, which then checkpoints)
    while steps() < config.run.max_env_steps and not (stop is not None and stop.is_set()):
        server.grant(dataset.table, items, after_mutations=consumed // items)
        learner.step()
        consumed += items
        if evaluator.due(steps()) and evaluator.run(steps()):
            break
        if checkpointer is not None and due.due():
            checkpoint()
        if progress is not None and time.monotonic() - last_log >= 1.0:
            last_log = time.monotonic()
            last = evaluator.last_return
            progress.write({"learner_steps": steps(), "eval_return": last if last is not None else float("nan")})
    terminated = stop is not None and stop.is_set()
    if not terminated and not evaluator.solved and evaluator.last_at != steps():
        evaluator.run(steps())
    learner.check_finite()
    wall_s = time.monotonic() - start
    if checkpointer is not None:
        checkpoint()
    result = evaluator.result(0, steps(), wall_s)
    result["time_breakdown"] = {"process": breakdown(stopwatch.seconds, wall_s)}
    result["offline"] = True
    if filled is not None:
        result["dataset"] = {"path": config.run.dataset, **filled}
    if terminated:
        result["terminated"] = getattr(stop, "reason", "SIGTERM")
    return result


__all__ = ["train_offline"]
