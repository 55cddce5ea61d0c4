"""What ``shoal train``, ``shoal scale``, ``shoal status`` and ``shoal compare`` do, over the
Python API.

``train`` turns the flags into an ``ExperimentConfig`` (or loads the one ``--resume`` names) and
hands it to ``run_experiment`` (one process) or ``run_distributed_experiment`` (``--launcher``),
with SIGTERM as a graceful stop.
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import signal
import sys
import threading
from typing import TYPE_CHECKING, Any

import jax

from shoal.agents import config_class
from shoal.agents.builders import try_factories
from shoal.core.files import check_run_directory, json_text
from shoal.core.native_log_filter import drop_native_log_lines, keep_native_log_lines
from shoal.core.settings import parse_setting
from shoal.envs.jax_envs import is_jax_env
from shoal.launch.experiments.cli.compare import compare as compare_runs
from shoal.launch.experiments.cli.compare import markdown_table
from shoal.launch.experiments.cli.status import describe_run
from shoal.launch.experiments.compilation_cache import enable_compilation_cache
from shoal.launch.experiments.config import experiment_config
from shoal.launch.experiments.distributed.settings import LaunchSettings, max_actors
from shoal.launch.experiments.exporting import export_policy
from shoal.launch.experiments.formats.minari_dataset import record_dataset
from shoal.launch.experiments.offline import require_dataset
from shoal.launch.experiments.run_directory.checkpoints import read_run
from shoal.launch.experiments.run_directory.claim import load_run
from shoal.launch.experiments.runner import run_experiment
from shoal.launch.experiments.trained_policy import PROGRESS_EVERY_S, evaluate_run
from shoal.launch.experiments.tune.report import describe_tune

if TYPE_CHECKING:
    from shoal.launch.experiments.config import ExperimentConfig

# The `shoal train` flags that may come with --resume (the rest are the run's own); those of
# NAMED_AGAIN only name again what the run's config.json does (runs.check_named_code).
NAMED_AGAIN = {"--agent": "agent", "--env": "env_id", "--env-factory": "env_factory", "--ray-address": "ray_address"}
RESUME_FLAGS = (
    "--resume",
    "--quiet",
    "--verbose",
    "--max-env-steps",
    "--checkpoint-every",
    "--track",
    "--record-dataset",
    *NAMED_AGAIN,
    "--trust-run-dir",
)


def train(
    args: argparse.Namespace,
    given: list[str],
    started: float,
    filter_stderr: bool = False,
    stop: threading.Event | None = None,
) -> dict[str, Any] | None:
    """Runs ``shoal train`` (``given``: the flags on its command line); returns the result, or
    ``None`` after ``--dry-run``. ``filter_stderr``: keep native libraries' log lines off fd 2.
    ``stop``: the run's stop request (``interrupts.install``); without one, SIGTERM stops the
    run gracefully while it runs."""
    config, launch = _resumed(args, given) if args.resume else _new(args, given)
    anakin = launch is None and (getattr(args, "launcher", None) == "anakin" or is_jax_env(config.env.id))
    if args.resume and launch is None:  # (the runner that wrote the checkpoint: a JAX env may have run with replay)
        run = read_run(args.resume)
        anakin = isinstance(run.get("anakin"), dict) if isinstance(run, dict) else anakin
    # Each setting is checked once, by the runner this hands the config to (run_experiment, or
    # preflight.prepare for a distributed run and its --dry-run), before any file or server is made.
    if args.dry_run:  # what would run, checked as a run checks it: the resolved config, and the program's graph
        if anakin:  # the compiled loop: checked as run_anakin checks it
            from shoal.launch.experiments.anakin import check_anakin  # lazy: chex etc., ~150 ms, anakin runs only

            config.validate_settings()
            check_anakin(config, len(jax.local_devices()))
            config.validate_agent(config.environment_spec())
            print(json_text({**config.to_dict(), "launch": None}, "the resolved config"))
            print("anakin: the envs, the policy and the agent's update compiled into one function on the devices")
            return None
        if launch is None:  # one process: checked as run_experiment checks it; no program graph
            config.validate_settings()
            spec = config.environment_spec()
            config.validate_agent(spec)
            try_factories(config.builder, spec, config.make_networks)  # (as claim_run_directory does)
            print(json_text({**config.to_dict(), "launch": None}, "the resolved config"))
            print(
                "one process: an actor, the learner, an embedded replay server and the evaluator share this "
                "process's thread (--launcher processes|inprocess|ray makes a program of nodes)"
            )
            return None
        from shoal.launch.experiments.distributed.preflight import prepare  # lazy: distributed only (grpc)

        prepared = prepare(config, launch, started, actors_flag=_actors_flag(given))  # (joins no cluster)
        try_factories(config.builder, prepared.spec, config.make_networks)  # (as claim_run_directory does)
        program = prepared.program
        print(json_text({**config.to_dict(), "launch": launch.record()}, "the resolved config"))
        print(program.describe())
        print("edges: " + ", ".join(f"{user} -> {used}" for user, used in program.edges()))
        return None
    enable_compilation_cache()

    if not filter_stderr:  # (--verbose, or main() called in a process of the caller's: fd 2 is left alone)
        keep_native_log_lines()
    else:  # (a local Ray's processes write to log files of its own: none holds the pipe)
        drop_native_log_lines()
    previous = None
    if stop is None:
        stop = threading.Event()
        previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())  # a graceful stop
    try:
        if launch:
            from shoal.launch.experiments.distributed.launch import run_launched  # lazy: distributed only (grpc)

            return run_launched(config, launch, stop=stop, launched_at=started, actors_flag=_actors_flag(given))

        if anakin:
            from shoal.launch.experiments.anakin import run_anakin  # lazy: chex etc., ~150 ms, anakin runs only

            return run_anakin(config, stop)
        return run_experiment(config, stop)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


# The flags of a distributed program (refused without --launcher rather than ignored).
DISTRIBUTED_FLAGS = ("--num-actors", "--ports", "--resources", "--ray-address", "--params-via")

# flag -> the ExperimentConfig field it sets (a preset's value stands unless the flag is given)
EXPERIMENT_FLAGS = {
    "--max-env-steps": "max_env_steps",
    "--num-envs": "num_envs",
    "--eval-every": "eval_every",
    "--eval-episodes": "eval_episodes",
    "--sticky-actions": "sticky_actions",
    "--video-every": "video_every",
    "--replay": "replay",
    "--actor-overlap": "actor_overlap",
}


def default_run_dir(agent: str, env: str, seed: int) -> str:
    """``runs/<agent>-<env>-s<seed>-<time>``: one folder, its name only letters, digits, ``.``,
    ``_`` and ``-`` (``module:EnvId``'s ``:`` and ``ALE/Game``'s ``/`` become ``-``), so a shell,
    ``scp``, rsync and every filesystem take it as it is."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", f"{agent}-{env}").strip("-.")
    return os.path.join("runs", f"{stem}-s{seed}-{datetime.datetime.now():%Y%m%d-%H%M%S}")


def _new(args: argparse.Namespace, given: list[str]) -> tuple[ExperimentConfig, LaunchSettings | None]:
    """The config and launch settings (``None``: one process) of a new run from ``args``."""
    if args.trust_run_dir:
        raise ValueError("--trust-run-dir applies to --resume (a new run names its own code)")
    settings = {key: parse_setting(config_class(args.agent), key, value) for key, value in args.overrides}
    groups: dict[str, str] = {}
    for pattern, group in args.agent_groups:
        if groups.setdefault(pattern, group) != group:
            raise ValueError(f"--agent-group {pattern}={group}: {pattern} is already in group {groups[pattern]}")
    chosen = {field: getattr(args, field) for flag, field in EXPERIMENT_FLAGS.items() if flag in given}
    config = experiment_config(
        args.agent,
        args.env,
        args.preset,
        settings,
        seed=args.seed,
        target_return=args.target_return,
        run_dir=args.run_dir,
        checkpoint_every_s=args.checkpoint_every,
        progress=not args.quiet,
        env_args=dict(args.env_args),
        env_factory=args.env_factory,
        action_masks=args.action_masks,
        agent_ids=args.agent_ids,
        agent_groups=groups,
        global_state=args.global_state,
        self_play=args.self_play,
        track=args.track,
        dataset=args.dataset,
        record_dataset=args.record_dataset,
        **chosen,
    )
    if args.run_dir is None:  # (named as the result names the agent: a plug-in's own name, not its class)
        name = getattr(config.builder, "name", None) or args.agent.rpartition(":")[2]
        config = config.replace(run_dir=default_run_dir(name, args.env, args.seed))
    distributed_only = [flag for flag in DISTRIBUTED_FLAGS if flag in given]
    if distributed_only and (args.launcher == "anakin" or (args.launcher is None and is_jax_env(args.env))):
        raise ValueError(
            f"{', '.join(distributed_only)} apply to a distributed program; --launcher anakin runs the envs "
            "and the update in one compiled function on this machine's devices (set --num-envs instead)"
        )
    if args.launcher is None and distributed_only:
        raise ValueError(
            f"{', '.join(distributed_only)} apply to a distributed program; add --launcher "
            "processes, inprocess or ray (or drop them: one process runs one actor and uses no ports "
            "nor resources)"
        )
    require_dataset(config)  # (bc, cql: before a --dry-run prints a run that could not start)
    if (args.dataset is not None or getattr(config.builder, "offline", False)) and (
        args.launcher is not None or is_jax_env(args.env)
    ):
        raise ValueError(
            f"--dataset runs in one process (an offline agent, or replay seeded from a dataset): drop --launcher "
            f"{args.launcher or 'anakin'}"
        )
    if args.record_dataset is not None and args.launcher is None and is_jax_env(args.env):
        raise ValueError(
            f"--record-dataset records a one-process run's actor, and {args.env} runs in the compiled loop "
            "(--launcher anakin), whose steps stay on the device: record a trained policy with shoal record"
        )
    if args.record_dataset is not None and args.launcher is not None:
        raise ValueError(f"--record-dataset records a one-process run's actor: drop --launcher {args.launcher}")
    launch = None
    if args.launcher not in (None, "anakin"):  # (checked where the run checks it: preflight.prepare)
        launch = LaunchSettings(
            launcher=args.launcher,
            num_actors=args.num_actors,
            ray_address=args.ray_address,
            resources=dict(args.resources),
            ports=args.ports,
            params_via=args.params_via,
        )
    return config, launch


def _actors_flag(given: list[str]) -> str:
    """How an error names the number of actors: the flag, unless a resumed run's record set it."""
    return "num_actors" if "--resume" in given else "--num-actors"


def _resumed(args: argparse.Namespace, given: list[str]) -> tuple[ExperimentConfig, LaunchSettings | None]:
    """The config and launch settings ``args.resume`` saved (only ``RESUME_FLAGS`` may change)."""
    extra = [flag for flag in given if flag not in RESUME_FLAGS]
    if extra:
        raise ValueError(
            f"--resume continues a run with its saved settings; drop {', '.join(extra)} "
            f"(only {', '.join(RESUME_FLAGS[1:])} may come with it)"
        )
    changes: dict[str, Any] = {"progress": not args.quiet}
    if "--max-env-steps" in given:
        changes["max_env_steps"] = args.max_env_steps
    if "--checkpoint-every" in given:
        changes["checkpoint_every_s"] = args.checkpoint_every
    if "--track" in given:
        changes["track"] = args.track
    if "--record-dataset" in given:
        changes["record_dataset"] = args.record_dataset
    for flag, key in NAMED_AGAIN.items():  # (the run's own value, named again: the resume may use it)
        if flag in given:
            changes[key] = getattr(args, flag[2:].replace("-", "_"))
    return load_run(args.resume, trust_run_dir=args.trust_run_dir, **changes)


def control(args: argparse.Namespace) -> None:
    """``shoal scale`` / ``shoal status``: prints the running program's node table; ``status``
    then (after a blank line) what the run's files say of it (``status.describe_run``), also
    of a run that ended or runs in one process. ``status`` first checks the run directory as a
    run does (``check_run_directory``: no link in it, nothing another user owns; an entry a live
    run removes meanwhile is passed): it reads nothing through a link."""
    from shoal.launch.programs.control import connect_control  # lazy: grpc, only shoal scale/status ask a program

    if args.command == "status" and os.path.isfile(os.path.join(args.run_dir, "tune.json")):  # (a shoal tune's)
        check_run_directory(args.run_dir, flag=None)  # (as a run's: nothing read through a link)
        print("\n".join(describe_tune(args.run_dir)), flush=True)
        return
    if args.command == "scale" and not 1 <= args.actors <= max_actors():
        raise ValueError(
            f"--actors must be in [1, {max_actors()}] on this machine ({os.cpu_count()} cores), got {args.actors}"
        )
    is_run = args.command == "status" and os.path.isfile(os.path.join(args.run_dir, "config.json"))
    if is_run:  # (before anything is read or printed)
        check_run_directory(args.run_dir, flag=None)  # (a refusal names what to fix here, not another --run-dir)
    try:
        client = connect_control(args.run_dir)
    except ValueError:
        if not is_run:  # (not a run directory at all: say why there is no program to ask)
            raise
        client = None
    if client is not None:
        rows = client.scale("actor", args.actors) if args.command == "scale" else client.status()
        print(f"{'node':<14} {'group':<10} {'state':<12} {'restarts':>8}")
        for row in rows:
            print(f"{row['label']:<14} {row['group']:<10} {row['state']:<12} {row['restarts']:>8}")
        autoscale = client.autoscale()
        if autoscale is not None:
            print(f"actors: {autoscale['mode']}, target {autoscale['target']}: {autoscale['reason']}")
    if is_run:
        if client is not None:
            print()
        print("\n".join(describe_run(args.run_dir, running=client is not None)), flush=True)


def evaluate(args: argparse.Namespace) -> dict:
    """``shoal evaluate``: the run's policy on ``--episodes`` episodes (``trained.evaluate_run``)."""
    return evaluate_run(
        args.run_dir,
        episodes=args.episodes,
        checkpoint=args.checkpoint,
        seed=args.seed,
        greedy=not args.sample,
        env_args=dict(args.env_args),
        trust_run_dir=args.trust_run_dir,
        progress_every_s=PROGRESS_EVERY_S,
        **_named(args),
    )


def _named(args: argparse.Namespace) -> dict:
    """The code a run directory names, named again on the command line (``--agent`` ...)."""
    return {key: getattr(args, key) for key in ("agent", "env_factory", "env_id") if getattr(args, key)}


def export(args: argparse.Namespace) -> dict:
    """``shoal export``: the run's greedy policy as a ``jax.export`` file or an ONNX model (``exporting.export_policy``)."""
    return export_policy(
        args.run_dir,
        args.out,
        checkpoint=args.checkpoint,
        batch_size=args.batch_size,
        trust_run_dir=args.trust_run_dir,
        format=args.format,
        **_named(args),
    )


def record(args: argparse.Namespace) -> dict:
    """``shoal record``: the run's policy's episodes as a Minari dataset (``formats.minari_dataset``)."""
    return record_dataset(
        args.run_dir,
        args.out,
        args.episodes,
        dataset_id=args.dataset_id,
        epsilon=args.epsilon,
        sample=args.sample,
        seed=args.seed,
        checkpoint=args.checkpoint,
        trust_run_dir=args.trust_run_dir,
        **_named(args),
    )


def compare(args: argparse.Namespace) -> None:
    """``shoal compare``: prints the markdown table, writes it and the plots to ``--out``."""
    summary = compare_runs(args.run_dirs, by=args.by, out=args.out, samples=args.bootstrap_samples)
    print(markdown_table(summary), end="", flush=True)
    print(
        f"shoal compare: wrote {os.path.join(args.out, 'table.md')}, summary.json and a PNG and SVG per task",
        file=sys.stderr,
    )
