"""``shoal tune``: its flags (``add_parser``) and what it does (``tune_command``).

    shoal tune --agent dqn --env CartPole-v1 --trials 20 --max-env-steps 30000 --out runs/tune-dqn
    shoal tune --resume runs/tune-dqn            # an interrupted tune, its finished trials kept
    shoal status runs/tune-dqn                   # its trials, best first
    shoal tune ... --jobs 16 --launcher ray --ray-address auto   # trials as Ray tasks (on_ray)

Every check comes before anything is written or started (one ``shoal: error:`` line, exit 2):
``--jobs`` above this machine's cores (with ``--launcher ray``: the cluster's CPUs), a space naming a setting the agent has not, a range that
is empty or of the wrong type, a study file of another agent, Optuna not installed. SIGTERM (or
Ctrl-C) stops the running trials (each marked ``interrupted``: failed, not counted), keeps the
finished ones, writes the reports and prints the summary line (exit 143, or 130).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import multiprocessing
import os
import re
import signal
import sys
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from shoal.core.files import check_run_directory
from shoal.core.settings import parse_setting
from shoal.launch.experiments import interrupts
from shoal.launch.experiments.cli.flag_values import parse_override
from shoal.launch.experiments.tune import on_ray
from shoal.launch.experiments.tune import study as studies
from shoal.launch.experiments.tune.report import write_reports
from shoal.launch.experiments.tune.spaces import DEFAULT_SPACES, check_space, load_space_file
from shoal.launch.experiments.tune.study import TuneSettings, check_settings
from shoal.launch.experiments.tune.trials import _print_trial, work, worker_main

# (--agent/--env only name the tune's own again)
RESUME_FLAGS = ("trials", "jobs", "launcher", "ray_address", "agent", "env")
NEW_TUNE_FLAGS = {
    "space": "--space",
    "out": "--out",
    "seeds": "--seeds",
    "objective": "--objective",
    "preset": "--preset",
    "overrides": "--set",
    "max_env_steps": "--max-env-steps",
    "eval_every": "--eval-every",
    "eval_episodes": "--eval-episodes",
    "num_envs": "--num-envs",
    "target_return": "--target-return",
    "global_state": "--global-state",
    "startup_trials": "--startup-trials",
    "sampler_seed": "--sampler-seed",
    "no_prune": "--no-prune",
}
EXPERIMENT_FLAGS = ("max_env_steps", "eval_every", "eval_episodes", "num_envs", "target_return", "global_state")


def add_parser(sub: Any) -> None:
    """Adds ``shoal tune`` to the ``shoal`` parser's subcommands."""
    text = "tune an agent's settings with Optuna (TPE, pruning from evaluations; the 'tune' extra)"
    tune = sub.add_parser(
        "tune",
        help=text,
        description=text.capitalize() + ". Each trial trains in this process (one process per "
        "--jobs); the study is DIR/study.db (SQLite), so an interrupted tune continues with --resume DIR. "
        "Writes DIR/trials.csv, summary.md, best_preset.json (shoal train --preset FILE) and importance.png "
        "(the 'plots' extra). Ends with one JSON line on stdout.",
    )
    tune.add_argument("--agent", default=None, help="the agent to tune (a registered name)")
    tune.add_argument(
        "--env",
        default=None,
        help="the env each trial trains on: a gymnasium id, or a JAX env's (gymnax:, brax:, craftax:, jaxmarl:), "
        "trained in the compiled loop as shoal train does",
    )
    tune.add_argument("--trials", type=int, default=None, help="trials to finish (with --resume: a new total)")
    tune.add_argument(
        "--space",
        default=None,
        metavar="FILE",
        help="the search space: a .yaml (space: and first_trials:) or .py (SPACE, FIRST_TRIALS) file "
        "(default: the agent's, docs/tuning.md)",
    )
    tune.add_argument(
        "--out", default=None, metavar="DIR", help="the tune directory (default: runs/tune-<agent>-<env>-<time>)"
    )
    tune.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="trials run at once, each in a process (default 1; at most the cores, or the Ray cluster's CPUs)",
    )
    tune.add_argument(
        "--launcher",
        choices=("processes", "ray"),
        default=None,
        help="where trials run: processes on this machine (default), or Ray tasks on a Ray cluster (--ray-address; "
        "without it a local Ray), the study staying here (docs/tuning.md)",
    )
    tune.add_argument(
        "--ray-address",
        default=None,
        help="with --launcher ray: the cluster to join (auto, HOST:PORT; default: a local Ray)",
    )
    tune.add_argument("--seeds", type=int, nargs="+", default=None, metavar="S", help="each trial's seeds (default: 0)")
    tune.add_argument(
        "--objective",
        default=None,
        help="iqm (default: the interquartile mean of the seeds' final evaluation returns, maximized) or "
        "time-to-threshold (env steps to the target return, minimized; no pruning)",
    )
    tune.add_argument(
        "--resume",
        default=None,
        metavar="DIR",
        help="continue the tune in DIR (--trials, --jobs, --launcher, --ray-address may change)",
    )
    tune.add_argument("--preset", default=None, metavar="NAME", help="the preset trials start from (default: auto)")
    tune.add_argument(
        "--set",
        dest="overrides",
        action="append",
        type=parse_override,
        default=None,
        metavar="KEY=VALUE",
        help="an agent setting every trial has (repeatable; not one the space samples)",
    )
    tune.add_argument("--max-env-steps", type=int, default=None, help="each seed's step budget (default: the preset's)")
    tune.add_argument("--eval-every", type=int, default=None, help="env steps between evaluations (pruning points)")
    tune.add_argument("--eval-episodes", type=int, default=None, help="episodes per evaluation")
    tune.add_argument("--num-envs", type=int, default=None, help="envs stepped together")
    tune.add_argument("--target-return", type=float, default=None, help="a seed stops at this mean evaluation return")
    tune.add_argument(
        "--global-state",
        action="store_true",
        default=None,
        help="many agents: the value head reads the global state (MAPPO; as shoal train's flag)",
    )
    tune.add_argument(
        "--startup-trials",
        type=int,
        default=None,
        metavar="N",
        help="trials sampled at random, and finished before any is pruned (default 5)",
    )
    tune.add_argument("--sampler-seed", type=int, default=None, help="the TPE sampler's seed (default 0)")
    tune.add_argument("--no-prune", action="store_true", default=None, help="never prune a trial")


def default_tune_dir(agent: str, env_id: str) -> str:
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", f"tune-{agent}-{env_id}").strip("-.")
    return os.path.join("runs", f"{stem}-{datetime.datetime.now():%Y%m%d-%H%M%S}")


def _settings(args: argparse.Namespace) -> TuneSettings:
    """A new tune's settings from its flags (checked, nothing written)."""
    from shoal.agents import config_class  # lazy: JAX, off the CLI's path

    if args.agent is None or args.env is None or args.trials is None:
        missing = [
            flag
            for flag, value in (("--agent", args.agent), ("--env", args.env), ("--trials", args.trials))
            if value is None
        ]
        raise ValueError(f"shoal tune needs {', '.join(missing)} (or --resume DIR)")
    config_cls = config_class(args.agent)  # (an unknown agent: one line naming the known ones)
    if args.space is not None:
        space, first = load_space_file(args.space)
        where = f"--space {args.space}"
    elif args.agent in DEFAULT_SPACES:
        space, first, where = DEFAULT_SPACES[args.agent], [], f"{args.agent}'s default space"
    else:
        raise ValueError(f"{args.agent} has no default search space: give one with --space FILE (docs/tuning.md)")
    experiment = {name: getattr(args, name) for name in EXPERIMENT_FLAGS if getattr(args, name) is not None}
    settings = TuneSettings(
        agent=args.agent,
        env_id=args.env,
        trials=args.trials,
        space=check_space(args.agent, config_cls, space, first, where),
        seeds=tuple(args.seeds or (0,)),
        objective=args.objective or "iqm",
        preset=args.preset or "auto",
        fixed={key: parse_setting(config_cls, key, value) for key, value in args.overrides or []},
        experiment=experiment,
        startup_trials=5 if args.startup_trials is None else args.startup_trials,
        sampler_seed=args.sampler_seed or 0,
        prune=not args.no_prune,
    )
    check_settings(settings, where)
    return settings


def _check_jobs_and_optuna(jobs: int, launcher: str = "processes", ray_address: str | None = None) -> None:
    """``--jobs`` against this machine's cores (a Ray cluster's CPUs are counted when it is
    joined), ``--ray-address`` only with ``--launcher ray``, and Optuna installed."""
    if launcher not in ("processes", "ray"):
        raise ValueError(f"launcher must be processes or ray, got {launcher!r}")
    if ray_address and launcher != "ray":
        raise ValueError(f"--ray-address {ray_address} needs --launcher ray")
    cores = os.cpu_count() or 1
    if jobs < 1 or (jobs > cores and not ray_address):
        raise ValueError(f"--jobs must be in [1, {cores}] on this machine ({cores} cores), got {jobs}")
    try:
        import optuna  # noqa: F401 -- lazy: optional extra (tune)
    except ImportError:
        raise ValueError("shoal tune needs Optuna: pip install 'shoal[tune]' (or pip install optuna)") from None


# (the flat names each trial's run sets itself)
TRIAL_FIELDS = ("seed", "run_dir", "progress", "callbacks")


def run_tune(
    agent: str,
    env_id: str,
    trials: int,
    *,
    space: Mapping[str, Any] | str | None = None,
    first_trials: Sequence[Mapping[str, Any]] = (),
    out: str | None = None,
    jobs: int = 1,
    launcher: str = "processes",
    ray_address: str | None = None,
    seeds: Sequence[int] = (0,),
    objective: str = "iqm",
    preset: str = "auto",
    settings: Mapping[str, Any] | None = None,
    startup_trials: int = 5,
    sampler_seed: int = 0,
    prune: bool = True,
    stop: threading.Event | None = None,
    **experiment: Any,
) -> dict[str, Any]:
    """``shoal tune`` from Python: a new tune of ``agent`` on ``env_id`` in ``out`` (default
    ``runs/tune-<agent>-<env>-<time>``); returns the summary the command prints.

    ``space``: a dict as a space file's ``space:`` (with ``first_trials``), a file's path, or
    ``None`` (the agent's default space); ``settings``: agent settings every trial has (``--set``);
    ``experiment``: experiment settings by flat name (``max_env_steps=20_000, eval_every=2_000``);
    ``stop``: set it to stop the tune as SIGTERM does; ``launcher="ray"`` (with ``ray_address``):
    the trials as Ray tasks, as ``--launcher ray``. Checked as the command checks them
    (``ValueError``, one line, before anything is written). Resume with ``shoal tune --resume``."""
    from shoal.agents import config_class  # lazy: JAX, off the CLI's path

    _check_jobs_and_optuna(jobs, launcher, ray_address)
    config_cls = config_class(agent)
    if isinstance(space, str):
        space, first_trials = load_space_file(space)
        where = "the space file"
    elif space is None:
        if agent not in DEFAULT_SPACES:
            raise ValueError(f"{agent} has no default search space: give one (space=...)")
        space, where = DEFAULT_SPACES[agent], f"{agent}'s default space"
    else:
        where = "the space"
    taken = sorted(set(experiment) & set(TRIAL_FIELDS))
    if taken:
        raise ValueError(f"{', '.join(taken)}: each trial sets it itself (seeds=..., out=...)")
    tune = TuneSettings(
        agent=agent,
        env_id=env_id,
        trials=trials,
        space=check_space(agent, config_cls, space, first_trials, where),
        seeds=tuple(seeds),
        objective=objective,
        preset=preset,
        fixed=dict(settings or {}),
        experiment=dict(experiment),
        startup_trials=startup_trials,
        sampler_seed=sampler_seed,
        prune=prune,
    )
    check_settings(tune, where)
    tune_dir = out or default_tune_dir(agent, env_id)
    check_run_directory(tune_dir, flag="out")
    studies.check_new_directory(tune_dir, agent)
    return execute(tune_dir, tune, jobs, stop, launcher=launcher, ray_address=ray_address)


def tune_command(args: argparse.Namespace, stop: threading.Event | None = None) -> dict[str, Any]:
    """Runs ``shoal tune``; returns its summary (``"terminated"``: the signal that stopped it)."""
    jobs = 1 if args.jobs is None else args.jobs
    launcher = args.launcher or "processes"
    _check_jobs_and_optuna(jobs, launcher, args.ray_address)
    if args.resume is not None:
        extra = [flag for dest, flag in NEW_TUNE_FLAGS.items() if getattr(args, dest) is not None]
        if extra:
            raise ValueError(
                f"--resume continues a tune with its own settings; drop {', '.join(extra)} (only --trials, --jobs, --launcher, --ray-address may change)"
            )
        tune_dir = args.resume
        check_run_directory(tune_dir, resume=True, flag=None)  # (as shoal train --resume checks a run's)
        settings = studies.read_settings(tune_dir, named_agent=args.agent)
        studies.check_resumed(tune_dir, settings, args.agent, args.env)
        if args.trials is not None:
            settings = dataclasses.replace(settings, trials=args.trials)
            studies.check_settings(settings, os.path.join(tune_dir, studies.SETTINGS_FILE))
    else:
        settings = _settings(args)
        tune_dir = args.out or default_tune_dir(args.agent, args.env)
        check_run_directory(tune_dir, flag="--out")
        studies.check_new_directory(tune_dir, settings.agent)
    return execute(
        tune_dir, settings, jobs, stop, resumed=args.resume is not None, launcher=launcher, ray_address=args.ray_address
    )


def execute(
    tune_dir: str,
    settings: TuneSettings,
    jobs: int,
    stop: threading.Event | None = None,
    resumed: bool = False,
    launcher: str = "processes",
    ray_address: str | None = None,
) -> dict[str, Any]:
    """Runs a checked tune in ``tune_dir`` (``resumed``: its study exists) to its trials or
    ``stop``, its trials in processes here or as Ray tasks (``launcher``); returns its summary."""
    stop = stop if stop is not None else threading.Event()
    if launcher == "ray":  # (joined, and the cluster checked, before anything is written)
        tune_dir = os.path.abspath(tune_dir)  # (as every node's tasks and the study's actor see it)
        try:
            on_ray.join_cluster(ray_address, tune_dir, jobs, "--resume" if resumed else "--out")
            return _execute(tune_dir, settings, jobs, stop, resumed, launcher)
        finally:
            on_ray.leave_cluster()
    return _execute(tune_dir, settings, jobs, stop, resumed, launcher)


def _execute(
    tune_dir: str, settings: TuneSettings, jobs: int, stop: threading.Event, resumed: bool, launcher: str
) -> dict[str, Any]:
    if not resumed:
        studies.create(tune_dir, settings)
    with studies.locked(tune_dir):
        if resumed:
            _write_settings(tune_dir, settings)
            _fail_stale_trials(tune_dir)
        print(
            f"shoal tune: {tune_dir}: {settings.trials} trials of {settings.agent} on {settings.env_id}",
            file=sys.stderr,
            flush=True,
        )
        from shoal.launch.experiments.compilation_cache import enable_compilation_cache  # lazy: JAX, off the CLI's path

        enable_compilation_cache()  # (trials compile the same functions: the second on reads them)

        interrupts.run_begins()  # (from here a signal stops the trials: the finished ones are kept)
        if launcher == "ray":
            _run_on_ray(tune_dir, settings, jobs, stop)
        elif jobs == 1:
            _run_here(tune_dir, settings, stop)
        else:
            _run_processes(tune_dir, settings, jobs, stop)

        summary = write_reports(tune_dir, studies.load(tune_dir), settings)
    if stop.is_set():
        summary["terminated"] = getattr(stop, "reason", "SIGTERM")
    return summary


def _write_settings(tune_dir: str, settings: Any) -> None:
    with open(os.path.join(tune_dir, "tune.json"), "w") as f:
        json.dump(settings.record(), f, indent=2)
        f.write("\n")


def _fail_stale_trials(tune_dir: str) -> None:
    """Trials left running by a tune that was killed (none runs now: this process holds the
    directory's lock) are failed, with no error: interrupted (``trials.counted``)."""
    import optuna  # lazy: optional extra (tune)

    study = studies.load(tune_dir)
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        study.tell(t.number, state=optuna.trial.TrialState.FAIL)


def _reported(tune_dir: str, settings: Any, trial_number: int, state: str) -> None:
    """A trial's line, and the reports rewritten, once it ended (in this process)."""
    study = studies.load(tune_dir)
    _print_trial(study, study.get_trials(deepcopy=False)[trial_number], state)
    write_reports(tune_dir, study, settings)


def _run_here(tune_dir: str, settings: Any, stop: threading.Event) -> None:
    after = lambda study, trial, state: _reported(tune_dir, settings, trial.number, state)  # noqa: E731
    work(tune_dir, settings, stop, 0, on_trial=after)


def _run_on_ray(tune_dir: str, settings: Any, jobs: int, stop: threading.Event) -> None:
    on_ray.run_on_ray(
        tune_dir, settings, jobs, stop, lambda number, state: _reported(tune_dir, settings, number, state)
    )


def _run_processes(tune_dir: str, settings: Any, jobs: int, stop: threading.Event) -> None:
    """``jobs`` worker processes on the study; a stop is passed on to them as SIGTERM."""
    context = multiprocessing.get_context("spawn")  # (JAX in the parent: never fork it)
    workers = [
        context.Process(target=worker_main, args=(tune_dir, settings, i), name=f"tune-worker-{i}") for i in range(jobs)
    ]
    for w in workers:
        w.start()
    signalled = False
    while any(w.is_alive() for w in workers):
        if stop.is_set() and not signalled:
            for w in workers:
                if w.pid is not None and w.is_alive():
                    os.kill(w.pid, signal.SIGTERM)
            signalled = True
        next(w for w in workers if w.is_alive()).join(0.2)  # (a stop is passed on within 0.2 s)
    failed = [w.name for w in workers if w.exitcode not in (0, None) and not stop.is_set()]
    if failed:
        raise RuntimeError(f"tune worker(s) {', '.join(failed)} failed (their lines above say why)")
