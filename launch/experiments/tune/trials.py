"""Running a tune's trials: each one run per seed in this process -- ``run_experiment`` (Shoal's
own one-process training), or for a JAX env (``gymnax:``, ``brax:``, ``craftax:``, ``jaxmarl:``
ids) ``run_anakin``, the compiled loop, as ``shoal train`` picks it -- pruned from its evaluation
curve by a callback, its outcome told to the study; ``work`` asks for trials until the tune has
enough.

Each seed's run writes a run directory (``DIR/trials/<n>/s<seed>``: logs, ``eval.csv``, the
learner's last checkpoint, which ``shoal evaluate`` and ``shoal export`` read); its replay
checkpoint and its earlier learner checkpoints are removed when the run ends (a trial is never
resumed; replay, and a compiled-loop run's carry with its device replay, grow with the task).

A trial's states (Optuna's): ``COMPLETE`` (its objective), ``PRUNED`` (stopped at an evaluation
by the pruner: the median rule, from the trial's second evaluation on, once ``startup_trials``
trials finished), ``FAIL`` (its settings were refused or its run failed: ``error`` says why; or
the tune was stopped while it ran: ``interrupted``, failed with no ``error``, not counted:
another trial takes its place on ``--resume``).
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import threading
import time
from typing import Any

from shoal.envs.jax_envs import is_jax_env
from shoal.launch.experiments.callbacks import Callback, Evaluation
from shoal.launch.experiments.cli.aggregates import iqm
from shoal.launch.experiments.tune import study as studies
from shoal.launch.experiments.tune.study import TuneSettings

PRUNE_FROM_EVALUATION = 2  # (the first evaluation is an untrained policy's: noise, never a reason)


class PruneOnEvaluation(Callback):
    """Reports each evaluation's mean return to an Optuna trial (its step: the evaluation's
    number) and ends the run when the study's pruner prunes the trial."""

    def __init__(self, trial: Any) -> None:
        self.trial, self.pruned = trial, False

    def on_evaluation(self, evaluation: Evaluation) -> bool:
        self.trial.report(float(evaluation.mean_return), int(evaluation.num_evals))
        self.pruned = bool(self.trial.should_prune())
        return self.pruned


def objective_value(settings: TuneSettings, results: list[dict[str, Any]]) -> float:
    """The trial's value from its seeds' results."""
    if settings.objective == "iqm":
        return iqm([r["final_eval_return"] for r in results])
    budget = settings.experiment.get("max_env_steps")
    return iqm([r["env_steps"] if r.get("solved") else max(r["env_steps"], budget or 0) for r in results])


def run_trial(tune_dir: str, settings: TuneSettings, study: Any, trial: Any, stop: threading.Event) -> str:
    """Trains ``trial``'s seeds one after the other and tells the study how it ended; returns
    its state's name (``interrupted``: ``stop`` was set while it ran)."""
    import optuna  # lazy: optional extra (tune)

    started = time.monotonic()
    try:
        sampled = settings.space.sample(trial)
    except ValueError as e:  # (Optuna's own refusal of a parameter)
        return _fail(study, trial, str(e))
    trial.set_user_attr("settings", {k: list(v) if isinstance(v, tuple) else v for k, v in sampled.items()})
    results = []
    for i, seed in enumerate(settings.seeds):
        prune = PruneOnEvaluation(trial) if i == 0 and settings.prune and settings.objective == "iqm" else None
        run_dir = os.path.join(tune_dir, "trials", str(trial.number), f"s{seed}")
        try:
            config = studies.trial_config(settings, sampled, seed, run_dir, [prune] if prune else [])
            result = train_one(config, stop)
        except (ValueError, RuntimeError, FloatingPointError, TimeoutError, OSError) as e:
            return _fail(study, trial, f"seed {seed}: {e}")
        finally:  # (a trial's run never resumes: its replay checkpoint goes, and all but its last learner one)
            shutil.rmtree(os.path.join(run_dir, "checkpoints", "replay"), ignore_errors=True)
            _keep_last_learner_checkpoint(run_dir)
        if result.get("terminated") or stop.is_set():
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            return "interrupted"
        results.append(result)
        if prune is not None and prune.pruned:
            trial.set_user_attr("pruned_at_env_steps", result["env_steps"])
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            return "pruned"
    value = objective_value(settings, results)
    trial.set_user_attr("final_returns", [r["final_eval_return"] for r in results])
    trial.set_user_attr("env_steps", [r["env_steps"] for r in results])
    trial.set_user_attr("wall_s", round(time.monotonic() - started, 3))
    study.tell(trial, value)
    return "complete"


def _keep_last_learner_checkpoint(run_dir: str) -> None:
    """Removes every learner checkpoint of ``run_dir`` but the last (what ``shoal evaluate`` and
    ``export`` read): a compiled-loop run's holds its whole carry, a DQN or SAC device replay included."""
    learner = os.path.join(run_dir, "checkpoints", "learner")
    steps = sorted(int(name) for name in (os.listdir(learner) if os.path.isdir(learner) else ()) if name.isdigit())
    for step in steps[:-1]:
        shutil.rmtree(os.path.join(learner, str(step)), ignore_errors=True)


def train_one(config: Any, stop: threading.Event) -> dict[str, Any]:
    """One seed of a trial, trained as ``shoal train`` would: the compiled loop for a JAX env,
    Shoal's one-process runner for any other."""
    if is_jax_env(config.env.id):
        from shoal.launch.experiments.anakin import run_anakin  # lazy: chex etc., anakin runs only

        return run_anakin(config, stop)
    from shoal.launch.experiments.runner import run_experiment  # lazy: JAX, off the CLI's path

    return run_experiment(config, stop)


def _fail(study: Any, trial: Any, error: str) -> str:
    import optuna  # lazy: optional extra (tune)

    trial.set_user_attr("error", error.splitlines()[0] if error else "failed")
    study.tell(trial, state=optuna.trial.TrialState.FAIL)
    return "failed"


def counted(study: Any) -> int:
    """Trials that count toward ``--trials``: finished (complete, pruned, failed but not
    interrupted) or running (an enqueued first trial counts once it is asked for)."""
    from optuna.trial import TrialState  # lazy: optional extra (tune)

    total = 0
    for t in study.get_trials(deepcopy=False):
        if interrupted(t):
            continue
        total += t.state != TrialState.WAITING
    return total


def interrupted(trial: Any) -> bool:
    """Whether a (frozen) trial was interrupted: failed with no error (stopped by a signal, or
    left running by a tune that was killed)."""
    from optuna.trial import TrialState  # lazy: optional extra (tune)

    return trial.state == TrialState.FAIL and "error" not in trial.user_attrs


def sampler_and_pruner(settings: TuneSettings, worker: int, existing: int = 0) -> tuple[Any, Any]:
    """TPE and the median pruner (or none). The sampler's seed: ``sampler_seed`` + ``worker``,
    and on a resume (``existing`` trials in the study) another one, so that the resumed tune does
    not draw its first trials' settings again."""
    import optuna  # lazy: optional extra (tune)

    seed = settings.sampler_seed + worker + 100_003 * existing
    sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=settings.startup_trials)
    pruner = (
        optuna.pruners.MedianPruner(n_startup_trials=settings.startup_trials, n_warmup_steps=PRUNE_FROM_EVALUATION)
        if settings.prune
        else optuna.pruners.NopPruner()
    )
    return sampler, pruner


def work(tune_dir: str, settings: TuneSettings, stop: threading.Event, worker: int = 0, on_trial: Any = None) -> None:
    """Asks the study for trials and runs them until the tune has ``settings.trials`` of them or
    ``stop`` is set (``on_trial(study, trial, state)`` after each)."""
    study = studies.load(tune_dir)
    study.sampler, study.pruner = sampler_and_pruner(settings, worker, len(study.get_trials(deepcopy=False)))
    while not stop.is_set():
        with studies.locked(tune_dir, ".ask.lock", wait=True):  # (workers never ask past --trials)
            if counted(study) >= settings.trials:
                return
            trial = study.ask()
        state = run_trial(tune_dir, settings, study, trial, stop)
        if on_trial is not None:
            on_trial(study, trial, state)


def worker_main(
    tune_dir: str, settings: TuneSettings, worker: int
) -> None:  # pragma: no cover -- runs in a --jobs process
    """A ``--jobs`` worker process: ``work`` until done, SIGTERM or SIGINT (a graceful stop)."""
    from shoal.launch.experiments.compilation_cache import enable_compilation_cache  # lazy: JAX, off the CLI's path

    enable_compilation_cache()
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        work(tune_dir, settings, stop, worker, on_trial=_print_trial)
    except ValueError as e:
        print(f"shoal tune: error: worker {worker}: {e}", file=sys.stderr, flush=True)
        sys.exit(2)


def _print_trial(study: Any, trial: Any, state: str) -> None:
    """One line on stderr per trial that ended."""
    value = study.get_trials(deepcopy=False)[trial.number].value if state == "complete" else None
    settings = ", ".join(f"{k}={_short(v)}" for k, v in trial.user_attrs.get("settings", {}).items())
    error = trial.user_attrs.get("error") if hasattr(trial, "user_attrs") else None
    line = f"shoal tune: trial {trial.number} {state}" + (f": {value:.6g}" if value is not None else "")
    print(f"{line} ({settings})" + (f": {error}" if error else ""), file=sys.stderr, flush=True)


def _short(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)
