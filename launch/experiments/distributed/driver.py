"""``ProgramDriver``: what the launching process does while a distributed run runs (launched by
``shoal.launch.experiments.distributed.launch``): the progress line, the run's checkpoints (the learner
node writes its state and replay's; the driver gathers each actor's and the evaluator's schedule
and writes ``run.json``), stopping the program on ``stop``, and the run's result, put together
from the evaluator's result and every node's summary.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any, cast

from shoal.core.loggers import TerminalLogger, make_logger
from shoal.launch.experiments.config import ExperimentConfig
from shoal.launch.experiments.distributed.results import program_result
from shoal.launch.experiments.distributed.settings import max_actors
from shoal.launch.experiments.distributed.step_grants import LEARNING, TRANSIENT
from shoal.launch.experiments.evaluation import next_evaluation
from shoal.launch.experiments.run_directory.checkpoints import Periodic, commit, spec_record
from shoal.launch.programs.control import serve_control
from shoal.launch.programs.states import NodeState


class ProgramDriver:
    """Progress, checkpoints and the result of one launched program."""

    def __init__(
        self, config: ExperimentConfig, spec, saved: dict[str, Any] | None, launched_at: float, autoscale: Any = None
    ) -> None:
        self._config, self._saved, self._launched_at = config, saved, launched_at
        self._autoscale = autoscale  # (an autoscale_loop.AutoscaleLoop, for num_actors="auto...")
        self._spec = spec_record(spec)
        self._checkpoints = Periodic(config.run.checkpoint_every_s) if config.run.dir else None
        self._actors: dict[str, Any] = dict((saved or {}).get("actors") or {})  # last known states
        self._evaluator: dict[str, Any] | None = (saved or {}).get("evaluator")  # its last known schedule
        self._checkpointed: dict[str, int] | None = None  # the counter as the last checkpoint wrote it
        self._lock = threading.Lock()
        self._clients: dict[str, Any] = {}
        self._progress = Periodic(config.tracking.progress_every_s) if config.tracking.progress else None
        self._baseline: tuple[float, int] | None = None  # (time, env steps) the speed counts from
        # RUN_DIR/program.csv: the actors running, a row each time their number changes
        self._program_log = make_logger("program", config.run.dir, terminal=False) if config.run.dir else None
        self._actors_logged: int | None = None
        self._actor_counts: list[dict[str, Any]] = []  # (program.csv's rows of this launch, with why)
        self._autoscaled = 1  # (autoscale decisions seen: its history's length)
        if saved is not None:
            due_at = (saved.get("evaluator") or {}).get("next")
            print(
                f"shoal: resumed {config.run.dir} at env step {saved['env_steps']:,}: learner version "
                f"{saved['learner_version']} (state {saved['learner_digest']}), {len(self._actors)} actors, "
                f"{next_evaluation(due_at, saved['env_steps']) if isinstance(due_at, int) else 'next evaluation as scheduled'}",
                file=sys.stderr,
                flush=True,
            )

    def _client(self, run, label: str) -> Any:
        """A client to a node that is never restarted (counter, learner, evaluator), kept."""
        if label not in self._clients:
            self._clients[label] = run.client(label)
        return self._clients[label]

    def follow(self, run, stop: threading.Event | None) -> dict[str, Any]:
        """Drives ``run`` until it ends; returns the run's result."""
        terminated, hurried = False, False
        reason = lambda: getattr(stop, "reason", "SIGTERM")  # noqa: E731 -- (interrupts.StopRequest)
        try:
            if self._config.run.dir:
                bounds = (
                    (self._autoscale.scaler.low, self._autoscale.scaler.high) if self._autoscale else (1, max_actors())
                )
                serve_control(run, self._config.run.dir, {"actor": bounds}, self._autoscale)  # shoal scale / status
            while not run.done:
                if stop is not None and stop.is_set() and not terminated:
                    terminated = True
                    why = "interrupted (Ctrl-C)" if reason() == "SIGINT" else "terminated (SIGTERM)"
                    print(
                        f"shoal: stopping ({why}): a last checkpoint, then every node"
                        + ("; Ctrl-C again to kill them now" if hasattr(stop, "hurry") else ""),
                        file=sys.stderr,
                        flush=True,
                    )
                    threading.Thread(target=run.stop, args=(why,), daemon=True).start()
                if terminated and not hurried and getattr(stop, "hurry", threading.Event()).is_set():
                    hurried = True  # a second signal: no more waiting, every node killed now
                    print("shoal: stopping now: every node is killed", file=sys.stderr, flush=True)
                    run.hurry()
                if self._checkpoints is not None and self._checkpoints.due() and not terminated:
                    try:
                        self._checkpoint(run)
                    except Exception:  # a node died under the call: the program's failure says which
                        if not run.ending(within_s=5.0):
                            raise
                if self._autoscale is not None and not terminated:
                    self._tick_autoscale(run)
                self._log_actors(run)
                if self._progress is not None and self._progress.due():
                    self._progress.reset()
                    self._show_progress(run)
                time.sleep(0.05)
            results = run.wait()
        except BaseException as e:
            run.stop("interrupted (Ctrl-C)" if isinstance(e, KeyboardInterrupt) else f"the driver failed: {e!r:.200}")
            raise
        finally:
            print(run.summary(), file=sys.stderr, flush=True)
            if self._program_log is not None:
                self._program_log.close()
        evaluator = results.get("evaluator")
        if terminated and evaluator is None:  # stopped before the evaluator served: no evaluation
            evaluator = {"result": self._unevaluated()}
        if evaluator and evaluator.get("warning"):  # (the run ended short of its budget: say why, where the user looks)
            print(f"shoal: warning: {evaluator['warning']}", file=sys.stderr, flush=True)
        actors_ran = {
            label: run.states[label].value
            for label, worker in run.workers.items()
            if worker.node.group == "actor" and run.states[label] != NodeState.PENDING
        }
        return program_result(
            evaluator,
            run.results(),
            terminated=reason() if terminated else None,
            checkpointed=self._checkpointed,
            saved=self._saved,
            launched_at=self._launched_at,
            actor_counts=self._actor_counts,
            actors_ran=actors_ran,
            autoscale_mode=self._autoscale.status()["mode"] if self._autoscale is not None else None,
        )

    def _tick_autoscale(self, run) -> None:
        """One autoscale poll once the counter and learner serve; a failure turns autoscaling off
        (one warning line; the run goes on with the actors it has)."""
        if run.ending() or not (run.serving("counter") and run.serving("learner")):
            return
        try:
            self._autoscale.tick(run, self._client(run, "counter"))
        except Exception as e:  # noqa: BLE001
            if run.ending(within_s=1.0):
                return
            self._autoscale.pinned = len(run.running("actor"))
            print(
                f"shoal: warning: autoscaling stopped ({e!r:.200}); the run goes on with "
                f"{self._autoscale.pinned} actors",
                file=sys.stderr,
                flush=True,
            )

    def _log_actors(self, run) -> None:
        """A row of the ``program`` log when the number of running actors changed (not while
        the program ends), at the counter's env steps (the last checkpoint's before it serves);
        the same row, with its reason, in the result's ``actor_counts``."""
        actors = len(run.running("actor"))
        if actors == self._actors_logged or run.ending():
            return
        env_steps = self._known("env_steps")
        if run.serving("counter"):
            try:
                env_steps = int(self._client(run, "counter").get_counts().get("env_steps", 0))
            except Exception:  # noqa: BLE001 -- (ending: the last known count)
                pass
        if self._actors_logged is None:
            reason = "start"
        elif self._autoscale is not None and len(self._autoscale.history) > self._autoscaled:
            reason = self._autoscale.history[-1]["reason"]
        else:
            reason = "shoal scale"
        self._actors_logged = actors
        if self._autoscale is not None:
            self._autoscaled = len(self._autoscale.history)
        if self._program_log is not None:
            self._program_log.write({"env_steps": env_steps, "actors": actors})
        self._actor_counts.append(
            {
                "t_s": round(time.time() - self._launched_at, 1),
                "env_steps": env_steps,
                "actors": actors,
                "reason": reason,
            }
        )

    def _known(self, count: str) -> int:
        """The counter's ``count`` (``env_steps``, ``learner_steps``) as ``run.json`` holds it:
        the last checkpoint's, else the resumed run's, else 0. The one source of the result's
        counts: what a resume continues from."""
        if self._checkpointed is not None:
            return int(self._checkpointed.get(count, 0))
        saved = self._saved or {}
        return int(saved.get("env_steps", 0) if count == "env_steps" else (saved.get("counter") or {}).get(count, 0))

    def _unevaluated(self) -> dict[str, Any]:
        """The result's fields for a run stopped before its evaluator served (nothing evaluated)."""
        config, wall_s = self._config, round(time.time() - self._launched_at, 3)
        return {
            "agent": config.builder.name,
            "env": config.env.id,
            "seed": config.run.seed,
            "solved": False,
            "env_steps": self._known("env_steps"),
            "wall_s": wall_s,
            "train_s": wall_s,
            "eval_s": 0.0,
            "final_eval_return": None,
            "learner_steps": self._known("learner_steps"),
            "num_evals": 0,
        }

    def _show_progress(self, run) -> None:
        """The progress line, once the counter serves (the evaluator serves once the learner
        does: before that, the learner compiles and the line says so)."""
        if not run.serving("counter"):
            return
        try:
            counts = self._client(run, "counter").get_counts()
            evaluation = (
                self._client(run, "evaluator").progress() if run.serving("evaluator") else {"eval_return": None}
            )
        except Exception:  # noqa: BLE001 -- ending: no line this time
            return
        env_steps, now = int(counts.get("env_steps", 0)), time.monotonic()
        if self._baseline is None:  # (a resumed run's restored steps are not this run's speed)
            self._baseline = (now, env_steps)
        since, steps_then = self._baseline
        last = evaluation["eval_return"]
        row = {
            "env_steps": env_steps,
            "steps_per_s": (env_steps - steps_then) / max(now - since, 1e-9),
            "learner_steps": int(counts.get("learner_steps", 0)),
            "eval_return": float("nan") if last is None else last,
        }
        if not counts.get(LEARNING):  # (actors are paced until then: step_grants)
            row["waiting for the learner's first update:"] = (
                "its first batch" if run.serving("learner") else "compiling"
            )
        TerminalLogger("train").write(row)

    def _checkpoint(self, run, evaluator: dict[str, Any] | None | str = "ask") -> None:
        """The learner node writes the learner and replay; this process writes ``run.json`` with
        the counter (without the actors' step grants and the learner's first update,
        ``step_grants.TRANSIENT``: a resumed run's actors hold none, its learner compiles
        again), the evaluator's schedule (``"ask"``: from the evaluator) and every
        serving actor's schedule and RNG (an actor that is restarting, or not serving yet, keeps
        its last known one). Its ``env_steps`` (the counter's) and ``learner_steps`` (the
        learner's, as of the state it wrote) are the ones the run's result reports."""
        with self._lock:
            counts = {
                name: value
                for name, value in self._client(run, "counter").get_counts().items()
                if not name.startswith(TRANSIENT)
            }
            env_steps = int(counts.get("env_steps", 0))
            written = dict(self._client(run, "learner").checkpoint(env_steps))
            # (the learner's own count at its checkpoint: its state's, which a resume restores;
            # the counter's lags it by up to one report)
            counts["learner_steps"] = int(written.pop("learner_steps", counts.get("learner_steps", 0)))
            actors = {}
            for label in run.running("actor", placed=True):
                if not run.serving(label) or not run.is_running(label):
                    if label in self._actors:
                        actors[label] = self._actors[label]
                    continue
                try:
                    actors[label] = run.client(label, timeout_s=5).futures.save().result(timeout=5)
                except Exception as e:  # noqa: BLE001 -- restarting, or frozen: its last known state stands
                    print(
                        f"shoal: warning: {label} did not hand over its schedule ({e!r:.200}); "
                        "the checkpoint keeps its previous one",
                        file=sys.stderr,
                        flush=True,
                    )
                    if label in self._actors:
                        actors[label] = self._actors[label]
            self._actors = actors
            if evaluator == "ask":
                evaluator = self._client(run, "evaluator").save()
            self._evaluator = cast("dict[str, Any] | None", evaluator)  # (no longer "ask")
            commit(
                cast(str, self._config.run.dir),  # (checkpoints: only where there is a run dir)
                written,
                env_steps,
                agent=self._config.builder.name,
                spec=self._spec,
                counter=counts,
                evaluator=evaluator,
                actors=actors,
            )
            cast(Periodic, self._checkpoints).reset()
            self._checkpointed = {"env_steps": env_steps, "learner_steps": int(counts.get("learner_steps", 0))}

    def last_checkpoint(self, run) -> None:
        """The final checkpoint (``launch``'s ``before_stop``), while the nodes that hold the
        run's state -- counter, learner, replay -- still run: also after another node failed
        (e.g. the evaluator: its last known schedule is kept). Skipped when one of them never
        served (a stop during start-up: nothing new to save) or is gone."""
        if self._checkpoints is None or not all(
            run.serving(label) and run.is_running(label) for label in ("counter", "learner", "replay")
        ):
            return
        done = run.results().get("evaluator")  # (an evaluator that ended hands its schedule over)
        if done:
            evaluator = done["schedule"]
        else:
            evaluator = "ask" if run.serving("evaluator") and run.is_running("evaluator") else self._evaluator
        if run.failed:
            print(
                f"shoal: the program failed ({run.reason}); a last checkpoint of what still runs",
                file=sys.stderr,
                flush=True,
            )
        self._checkpoint(run, evaluator)
