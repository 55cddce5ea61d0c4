"""The ``shoal`` command line.

    shoal train --agent dqn --env CartPole-v1 --seed 0

Trains in one process with an embedded Reverb server, prints a progress line to stderr, and
ends with one JSON line on stdout (see ``run_experiment`` for its fields). Bad settings exit
with status 2 and one ``shoal: error: ...`` line, before anything is trained.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import errno
import json
import os
import signal
import sys
import threading
import time
import types
import typing
from typing import Any, Sequence


def _parse_override(text: str) -> tuple[str, str]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"--set takes KEY=VALUE, got {text!r}")
    key, value = text.split("=", 1)
    return key.strip(), value.strip()


def _convert(config_cls, key: str, value: str) -> Any:
    """``value`` parsed as the type of the config field ``key`` (``none`` for an optional one)."""
    fields = {f.name: f for f in dataclasses.fields(config_cls)}
    if key not in fields:
        raise ValueError(f"unknown agent setting {key!r} for --set; known: {', '.join(sorted(fields))}")
    hint = typing.get_type_hints(config_cls)[key]
    optional = typing.get_origin(hint) in (typing.Union, types.UnionType)
    if optional:  # e.g. float | None
        if value.lower() == "none":
            return None
        hint = next(t for t in typing.get_args(hint) if t is not type(None))
    kind = typing.get_origin(hint) or hint
    try:
        if kind is bool:
            if value.lower() not in ("true", "false", "1", "0"):
                raise ValueError(value)
            return value.lower() in ("true", "1")
        if kind is tuple:
            return tuple(int(v) for v in value.split(",") if v)
        return kind(value)
    except ValueError:
        default = fields[key].default
        raise ValueError(f"--set {key}={value!r}: expected a {kind.__name__} like {default!r}") from None


def _parse_resources(text: str) -> tuple[str, Any]:
    """``GROUP:NAME=VALUE[,NAME=VALUE...]`` -> ``(group, Resources)``."""
    from shoal.launch.programs import Resources

    group, _, spec = text.partition(":")
    try:
        pairs = dict((k.strip(), float(v)) for k, v in (item.split("=", 1) for item in spec.split(",") if item))
    except ValueError:
        pairs = {}
    if not group or not pairs:
        raise argparse.ArgumentTypeError(f"--resources takes GROUP:NAME=VALUE[,NAME=VALUE...], got {text!r}")
    standard = {name: pairs.pop(name) for name in ("num_cpus", "num_gpus", "memory") if name in pairs}
    if "memory" in standard:
        standard["memory"] = int(standard["memory"])
    return group, Resources(**standard, custom=pairs)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="shoal", description="Shoal: RL actor-learner framework.")
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser("train", help="train an agent on a gymnasium task",
                           description="Train an agent in one process with an embedded Reverb "
                           "replay server, or as a distributed program (--launcher). Ends with one "
                           "JSON line on stdout. Compiled JAX code is cached in ~/.cache/shoal/jax "
                           "(SHOAL_COMPILATION_CACHE=DIR or off).")
    train.add_argument("--agent", default="dqn", help="agent to train (default: dqn)")
    train.add_argument("--env", default="CartPole-v1", help="gymnasium environment id (default: CartPole-v1)")
    train.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    train.add_argument("--max-env-steps", type=int, default=100_000,
                       help="step budget over all envs (default: 100000)")
    train.add_argument("--target-return", type=float, default=None,
                       help="stop when the mean evaluation return reaches this (default: the "
                       "env's reward_threshold, 475 for CartPole-v1)")
    train.add_argument("--eval-every", type=int, default=2_000,
                       help="env steps between evaluations (default: 2000)")
    train.add_argument("--eval-episodes", type=int, default=10,
                       help="greedy episodes per evaluation (default: 10)")
    train.add_argument("--num-envs", type=int, default=16,
                       help="envs stepped together by the actor (default: 16)")
    train.add_argument("--run-dir", default=None,
                       help="output folder (default: runs/<agent>-<env>-s<seed>-<time>)")
    train.add_argument("--set", dest="overrides", action="append", type=_parse_override, default=[],
                       metavar="KEY=VALUE", help="override an agent setting, e.g. --set "
                       "learning_rate=3e-4 (repeatable; see the agent's config dataclass)")
    train.add_argument("--launcher", choices=["processes", "inprocess", "ray"], default=None,
                       help="run as a distributed program: one process per node, one thread per "
                       "node (for debugging), or one Ray actor per node. Default: the "
                       "single-process runner")
    train.add_argument("--num-actors", type=int, default=4,
                       help="actor nodes of a distributed program (default: 4; change it while "
                       "the program runs with `shoal scale RUN_DIR --actors N`)")
    train.add_argument("--ray-address", default=None,
                       help="the Ray cluster to join (auto, or HOST:PORT); default: start a local "
                       "Ray instance with this machine's CPUs")
    train.add_argument("--resources", action="append", type=_parse_resources, default=[],
                       metavar="GROUP:NAME=VALUE,...", help="what each node of a group asks of the "
                       "Ray cluster: num_cpus, num_gpus, memory (bytes) or a custom resource, e.g. "
                       "--resources learner:num_gpus=1 --resources actor:actor_host=1 (repeatable)")
    train.add_argument("--dry-run", action="store_true",
                       help="print the distributed program's graph (nodes, groups, edges) and exit")
    train.add_argument("--checkpoint-every", type=float, default=300.0, metavar="SECONDS",
                       help="seconds between checkpoints in the run directory (default: 300); "
                       "one is also taken at the end and on SIGTERM")
    train.add_argument("--resume", default=None, metavar="RUN_DIR",
                       help="continue the run in RUN_DIR from its last checkpoint, with its saved "
                       "settings (learner, replay, counters, schedules and RNG are restored); "
                       "--max-env-steps may set a new budget")
    train.add_argument("--quiet", action="store_true", help="no progress line")
    train.add_argument("--verbose", action="store_true",
                       help="keep native libraries' log lines (Reverb's, TensorFlow's) on stderr")
    for name, text in (("scale", "grow or shrink the actors of a running distributed program"),
                       ("status", "show the node table of a running distributed program")):
        command = sub.add_parser(name, help=text, description=text.capitalize() + ".")
        command.add_argument("run_dir", help="the program's run directory (its --run-dir)")
        if name == "scale":
            command.add_argument("--actors", type=int, required=True, help="actors to run from now on")
    return parser


MAX_ACTORS_PER_CORE, MIN_ACTOR_CAP = 4, 64
RESUMABLE = ("--quiet", "--verbose", "--max-env-steps", "--checkpoint-every")  # the training flags that may come with --resume


def max_actors() -> int:
    """The most actor processes one machine may start (more wants a cluster: --launcher ray)."""
    return max(MIN_ACTOR_CAP, MAX_ACTORS_PER_CORE * (os.cpu_count() or 1))


def train(args: argparse.Namespace, started: float) -> dict[str, Any]:
    from shoal.launch.experiments.compilation_cache import enable_compilation_cache
    from shoal.launch.experiments.runner import run_experiment

    config = _resumed_config(args) if args.resume else _new_config(args)
    config.validate()  # every setting against its range, before any file or server is made
    if args.launcher is not None or args.dry_run:
        _check_actors(args)
    enable_compilation_cache()
    if not args.verbose and args.launcher != "ray":  # (Ray's own processes would hold the pipe)
        from shoal.launch.experiments.quiet import drop_native_log_lines

        drop_native_log_lines()
    if args.launcher is None and not args.dry_run:
        stop = threading.Event()
        previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())  # a graceful stop
        try:
            result = run_experiment(config, stop)
        finally:
            signal.signal(signal.SIGTERM, previous)
    else:
        result = train_distributed(config, args, started)
        if result is None:
            return None
    result["agent"] = config.builder.name
    return result


def _new_config(args: argparse.Namespace):
    from shoal.agents import get_builder
    from shoal.launch.experiments.config import ExperimentConfig

    builder = get_builder(args.agent)
    overrides = {k: _convert(type(builder.config), k, v) for k, v in args.overrides}
    builder = get_builder(args.agent, **overrides)
    run_dir = args.run_dir or os.path.join(
        "runs", f"{args.agent}-{args.env}-s{args.seed}-{datetime.datetime.now():%Y%m%d-%H%M%S}")
    return ExperimentConfig(
        builder=builder, env_id=args.env, seed=args.seed, max_env_steps=args.max_env_steps,
        num_envs=args.num_envs, eval_every=args.eval_every, eval_episodes=args.eval_episodes,
        target_return=args.target_return, run_dir=run_dir, checkpoint_every_s=args.checkpoint_every,
        progress=not args.quiet)


def _resumed_config(args: argparse.Namespace):
    """The config ``args.resume`` saved, and its launch settings put back into ``args``."""
    from shoal.launch.experiments.config import config_from_dict

    defaults = vars(build_parser().parse_args(["train"]))
    given = [f"--{name.replace('_', '-')}" for name, value in vars(args).items()
             if name not in ("resume", "command") and value != defaults.get(name)
             and f"--{name.replace('_', '-')}" not in RESUMABLE]
    if given:
        raise ValueError(f"--resume continues a run with its saved settings; drop {', '.join(given)}")
    try:
        with open(os.path.join(args.resume, "config.json")) as f:
            saved = json.load(f)
    except FileNotFoundError:
        raise ValueError(f"{args.resume!r} is not a Shoal run directory (no config.json in it)") from None
    launch = saved.get("launch") or {}
    args.launcher, args.ray_address = launch.get("launcher"), launch.get("ray_address")
    args.num_actors = launch.get("num_actors", args.num_actors)
    args.resources = [_parse_resources(text) for text in launch.get("resources", [])]
    changed = {name: getattr(args, flag) for name, flag in (("max_env_steps", "max_env_steps"),
                                                            ("checkpoint_every_s", "checkpoint_every"))
               if getattr(args, flag) != defaults[flag]}
    return config_from_dict(saved, run_dir=args.resume, resume=True, progress=not args.quiet, **changed)


def _check_actors(args: argparse.Namespace) -> None:
    cap, cores = max_actors(), os.cpu_count() or 1
    if not isinstance(args.num_actors, int) or not 1 <= args.num_actors <= cap:
        raise ValueError(f"--num-actors must be an integer in [1, {cap}] on this machine "
                         f"({cores} cores), got {args.num_actors}; for more, use a cluster (--launcher ray)")
    if args.num_actors > cores and args.launcher != "ray":
        print(f"shoal: warning: {args.num_actors} actor processes on {cores} CPU cores: they will "
              "share the cores (fine for slow envs, slower per actor for fast ones)", file=sys.stderr)


def train_distributed(config, args: argparse.Namespace, started: float) -> dict[str, Any] | None:
    """Launches the distributed program; SIGTERM (what a cluster scheduler sends) stops it
    gracefully: the evaluator returns its result, which is printed, and ``shoal`` exits 143."""
    from shoal.launch.experiments.distributed import make_distributed_program
    from shoal.launch.experiments.runner import claim_run_directory

    program = make_distributed_program(config, num_actors=args.num_actors, launched_at=started)
    for group, resources in args.resources:
        program.set_resources(group, resources)
    if args.dry_run:
        print(program.describe())
        print("edges: " + ", ".join(f"{user} -> {used}" for user, used in program.edges()))
        return None
    if args.launcher == "ray":
        _require_ray()
    run_dir = claim_run_directory(config, launch={
        "launcher": args.launcher, "num_actors": args.num_actors, "ray_address": args.ray_address,
        "resources": [_resources_text(group, r) for group, r in args.resources]})
    try:
        result = _run_program(program, config, args, run_dir)
        run_dir.write_json("result.json", result)
    finally:
        run_dir.unlock()
    return result


def _run_program(program, config, args: argparse.Namespace, run_dir) -> dict[str, Any]:
    from shoal.launch.experiments.distributed import ACTOR_ENV
    from shoal.launch.programs import launch

    run = launch(program, args.launcher, run_dir=config.run_dir, group_env={"actor": ACTOR_ENV},
                 ray_address=args.ray_address)  # a token of its own (or SHOAL_TOKEN), never on argv
    run.serve_control(config.run_dir)  # for `shoal scale` / `shoal status`
    stop_following, terminated = threading.Event(), threading.Event()
    if args.launcher == "processes" and not args.quiet:  # the evaluator's progress line, here
        threading.Thread(target=_follow, daemon=True, args=(
            os.path.join(run.run_dir, "logs", "evaluator.log"), "[train]", stop_following)).start()

    def on_sigterm(*_) -> None:
        terminated.set()
        threading.Thread(target=run.stop, args=("terminated (SIGTERM)",), daemon=True).start()

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        results = run.wait()
    finally:
        signal.signal(signal.SIGTERM, previous)
        stop_following.set()
        print(run.summary(), file=sys.stderr, flush=True)
    result = results["evaluator"]
    if result is None:
        raise RuntimeError(f"program {program.name!r} ended before its evaluator returned a result")
    del run_dir  # (held by the caller)
    result.update(launcher=args.launcher)
    if terminated.is_set():
        result["terminated"] = "SIGTERM"
    return result


def _follow(path: str, prefix: str, stop: threading.Event) -> None:
    """Echoes the lines of a growing log file that start with ``prefix`` to stderr."""
    while not os.path.exists(path) and not stop.wait(0.2):
        pass
    with open(path) as f:
        while not stop.is_set():
            line = f.readline()
            if not line:
                stop.wait(0.2)
            elif line.startswith(prefix):
                print(line, end="", file=sys.stderr, flush=True)


def _resources_text(group: str, resources) -> str:
    values = {k: getattr(resources, k) for k in ("num_cpus", "num_gpus", "memory") if getattr(resources, k) is not None}
    values.update(resources.custom)
    return f"{group}:" + ",".join(f"{k}={v}" for k, v in values.items())


def _require_ray() -> None:
    try:
        import ray  # noqa: F401
    except ImportError:
        raise ValueError("the Ray launcher needs the 'ray' extra, which is not installed; run "
                         "pip install -e '.[ray]' (from the Shoal repository)") from None


def control(args: argparse.Namespace) -> None:
    from shoal.launch.programs.supervision import connect_control

    client = connect_control(args.run_dir)
    rows = client.scale("actor", args.actors) if args.command == "scale" else client.status()
    print(f"{'node':<14} {'group':<10} {'state':<12} {'restarts':>8}")
    for row in rows:
        print(f"{row['label']:<14} {row['group']:<10} {row['state']:<12} {row['restarts']:>8}")


DISK_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def _quiet_disk_errors() -> None:
    """A full disk is reported once, by ``main``: the same error in a logging thread or at exit
    (e.g. TensorBoard's flush) is not printed again as a traceback."""
    thread_hook, unraisable_hook = threading.excepthook, sys.unraisablehook

    def on_thread_error(info: Any) -> None:
        if not (isinstance(info.exc_value, OSError) and info.exc_value.errno in DISK_FULL):
            thread_hook(info)

    def on_unraisable(info: Any) -> None:
        if not (isinstance(info.exc_value, OSError) and info.exc_value.errno in DISK_FULL):
            unraisable_hook(info)

    threading.excepthook, sys.unraisablehook = on_thread_error, on_unraisable


def main(argv: Sequence[str] | None = None) -> int:
    started = time.time()
    parser = build_parser()
    args = parser.parse_args(argv)
    _quiet_disk_errors()
    try:
        if args.command in ("scale", "status"):
            control(args)
            return 0
        result = train(args, started)
        if result is None:  # --dry-run
            return 0
    except ValueError as e:
        print(f"shoal: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("shoal: interrupted", file=sys.stderr)
        return 130
    except (TimeoutError, RuntimeError, FloatingPointError) as e:  # a node died, a NaN loss, ...
        print(f"shoal: error: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        if e.errno not in DISK_FULL:
            raise
        print(f"shoal: error: cannot write {e.filename or 'to the run directory'}: {e.strerror} "
              "(free some space, or choose another --run-dir)", file=sys.stderr)
        return 1
    print(json.dumps(result), flush=True)
    return 143 if result.get("terminated") == "SIGTERM" else 0


if __name__ == "__main__":
    sys.exit(main())
