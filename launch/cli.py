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
import json
import os
import sys
from typing import Any, Sequence


def _parse_override(text: str) -> tuple[str, str]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"--set takes KEY=VALUE, got {text!r}")
    key, value = text.split("=", 1)
    return key.strip(), value.strip()


def _convert(config_cls, key: str, value: str) -> Any:
    fields = {f.name: f for f in dataclasses.fields(config_cls)}
    if key not in fields:
        raise ValueError(f"unknown agent setting {key!r} for --set; known: {', '.join(sorted(fields))}")
    default = fields[key].default
    try:
        if isinstance(default, bool):
            if value.lower() not in ("true", "false", "1", "0"):
                raise ValueError(value)
            return value.lower() in ("true", "1")
        if isinstance(default, tuple):
            return tuple(int(v) for v in value.split(",") if v)
        return type(default)(value)
    except ValueError:
        raise ValueError(f"--set {key}={value!r}: expected a {type(default).__name__} "
                         f"like {default!r}") from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="shoal", description="Shoal: RL actor-learner framework.")
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser("train", help="train an agent on a gymnasium task",
                           description="Train an agent in one process with an embedded Reverb "
                           "replay server. Ends with one JSON line on stdout.")
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
    train.add_argument("--quiet", action="store_true", help="no progress line")
    return parser


def train(args: argparse.Namespace) -> dict[str, Any]:
    from shoal.agents import get_builder
    from shoal.launch.experiment import ExperimentConfig, run_experiment

    builder = get_builder(args.agent)
    overrides = {k: _convert(type(builder.config), k, v) for k, v in args.overrides}
    builder = get_builder(args.agent, **overrides)
    run_dir = args.run_dir or os.path.join(
        "runs", f"{args.agent}-{args.env}-s{args.seed}-{datetime.datetime.now():%Y%m%d-%H%M%S}")
    config = ExperimentConfig(
        builder=builder, env_id=args.env, seed=args.seed, max_env_steps=args.max_env_steps,
        num_envs=args.num_envs, eval_every=args.eval_every, eval_episodes=args.eval_episodes,
        target_return=args.target_return, run_dir=run_dir, progress=not args.quiet)
    config.validate()  # before any file or server is made
    result = run_experiment(config)
    result["agent"] = args.agent
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        result = train(args)
    except ValueError as e:
        print(f"shoal: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("shoal: interrupted", file=sys.stderr)
        return 130
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
