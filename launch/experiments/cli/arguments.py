"""The ``shoal`` command line's arguments: the parser of ``shoal train``, ``shoal scale``,
``shoal status``, ``shoal evaluate`` and ``shoal compare`` (``build_parser``), and which ``shoal train`` options a command line gives,
whatever their values (``given_flags``: a flag given overrides the preset's value; with
``--resume`` only some may be given).

A usage error is one ``shoal: error: ...`` line on stderr and exit status 2, like every other
error of the command line (``shoal.launch.experiments.cli.main``).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from shoal.launch.experiments.cli import flag_values
from shoal.launch.experiments.tune.command import add_parser as add_tune_parser


class _Parser(argparse.ArgumentParser):
    """Usage errors in the one-line form every other error takes."""

    def error(self, message: str) -> NoReturn:
        print(f"shoal: error: {message} (see {self.prog} --help)", file=sys.stderr)
        sys.exit(2)


def _presets_text() -> str:
    try:
        from shoal.agents.presets import describe_presets  # lazy: the CLI's import stays light

        return describe_presets()
    except ImportError:  # pragma: no cover
        return "the agent's presets"


class _ShoalParser(_Parser):
    """The ``shoal`` parser; ``train_flags`` maps each ``shoal train`` option's destination to
    its flag (``overrides`` -> ``--set``), as the options were added."""

    train_flags: dict[str, str]


def build_parser(suppress_defaults: bool = False) -> _ShoalParser:
    """The parser (``suppress_defaults``: options not given are absent from the result)."""
    parser = _ShoalParser(prog="shoal", description="Shoal: RL actor-learner framework.")
    parser.train_flags = {}
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser(
        "train",
        help="train an agent on a gymnasium task",
        description="Train an agent in one process with an embedded Reverb "
        "replay server, or as a distributed program (--launcher). Ends with one "
        "JSON line on stdout. Compiled JAX code is cached in ~/.cache/shoal/jax "
        "(SHOAL_COMPILATION_CACHE=DIR or off).",
    )

    def add(*flags: str, **options: Any) -> None:
        action = train.add_argument(*flags, **options)
        parser.train_flags[action.dest] = flags[0]

    def default(value: Any) -> Any:
        return argparse.SUPPRESS if suppress_defaults else value

    add(
        "--agent",
        default=default("dqn"),
        help="agent to train: a registered name (dqn, ppo, impala, sac, "
        "or an installed plug-in's) or module:BuilderClass for your own (default: dqn)",
    )
    add(
        "--env",
        default=default("CartPole-v1"),
        help="gymnasium environment id, or module:EnvId to import "
        "the module that registers EnvId (default: CartPole-v1)",
    )
    add(
        "--env-factory",
        default=default(None),
        metavar="MODULE:FUNCTION",
        help="make each env with this "
        "function of yours (called with the --env-arg arguments, returning a gymnasium.Env) instead of "
        "--env's registration; --env then only names the env",
    )
    add(
        "--env-arg",
        dest="env_args",
        action="append",
        type=flag_values.parse_env_arg,
        default=default([]),
        metavar="KEY=VALUE",
        help="an argument of the env's constructor, e.g. --env-arg continuous=true "
        "for LunarLander-v3 (repeatable; values read as Python literals: 3, 0.5, true, 'text')",
    )
    add(
        "--no-action-masks",
        dest="action_masks",
        action="store_false",
        default=default(True),
        help="ignore the env's action masks (info['action_mask'] or an action_mask observation key): "
        "the agent may take every action (default: masked actions are never taken)",
    )
    add(
        "--agent-group",
        dest="agent_groups",
        action="append",
        type=flag_values.parse_agent_group,
        default=default([]),
        metavar="PATTERN=GROUP",
        help="a PettingZoo env: a policy per group of agents, each with its own "
        "parameters; the agents whose names match PATTERN (e.g. 'adversary_*') play in GROUP (repeatable; "
        "every agent in one group). Default: one policy shared by every agent",
    )
    add(
        "--no-agent-ids",
        dest="agent_ids",
        action="store_false",
        default=default(True),
        help="a PettingZoo env: leave each agent's identity (a one-hot) out of its observation "
        "(default: in, so that a shared policy can act differently per agent)",
    )
    add(
        "--global-state",
        action="store_true",
        default=default(False),
        help="a PettingZoo env: each agent's row also carries the env's global state (its state()), "
        "read by the value function only: a centralised critic (PPO: MAPPO)",
    )
    add(
        "--self-play",
        action="store_true",
        default=default(False),
        help="a two-player turn-based PettingZoo game (e.g. pettingzoo:pettingzoo.classic.connect_four_v3): "
        "the agent plays against frozen snapshots of itself; evaluations play a one-step lookahead player "
        "and report win rates against it, a random player and the snapshots",
    )
    add("--seed", type=int, default=default(0), help="random seed (default: 0)")
    add(
        "--max-env-steps",
        type=int,
        default=default(100_000),
        help="step budget over all envs (default: 100000, or the preset's)",
    )
    add(
        "--target-return",
        type=float,
        default=default(None),
        help="stop when the mean evaluation return "
        "reaches this (default: the env's reward_threshold, 475 for CartPole-v1)",
    )
    add(
        "--eval-every",
        type=int,
        default=default(2_000),
        help="env steps between evaluations (default: 2000, or the preset's)",
    )
    add(
        "--eval-episodes",
        type=int,
        default=default(10),
        help="greedy episodes per evaluation (default: 10, or the preset's)",
    )
    add(
        "--video-every",
        type=int,
        default=default(0),
        metavar="N",
        help="every N evaluations (from the "
        "first), record one evaluation episode to RUN_DIR/videos/ as an MP4 (the 'video' extra; default: 0, none; "
        "not with --launcher anakin)",
    )
    add(
        "--track",
        type=flag_values.parse_track,
        default=default(None),
        metavar="{wandb,mlflow,none}",
        help="also send the "
        "run's config, logs, videos and result to Weights & Biases (the 'wandb' extra; WANDB_* variables "
        "apply, e.g. WANDB_MODE=offline) or MLflow (the 'mlflow' extra; MLFLOW_TRACKING_URI, default "
        "sqlite:///mlflow.db here); with --resume, the same tracking run goes on (default: none)",
    )
    add(
        "--replay",
        choices=["reverb", "native"],
        default=default(None),
        help="the replay backend: "
        "Reverb (dm-reverb, Python 3.11 only) or Shoal's native one (any Python, no TensorFlow, seeded "
        "sampling); a resumed run keeps its own (default: reverb where it is installed, else native)",
    )
    add(
        "--num-envs",
        type=int,
        default=default(16),
        help="envs stepped together by an actor (default: 16, or the preset's)",
    )
    add(
        "--sticky-actions",
        type=float,
        default=default(0.25),
        metavar="P",
        help="Atari: the probability "
        "that the emulator repeats the previous action (default: 0.25, the published protocol)",
    )
    add(
        "--actor-overlap",
        choices=["auto", "off", "thread", "process"],
        default=default("auto"),
        help="where an actor's env steps while its policy and adder work: off (on the actor's thread), "
        "thread (EnvPool's and ale-py's envs, which leave the GIL), process (a worker process); auto "
        "(default): by env family for a distributed run's actors, off in one process (docs/benchmarks.md)",
    )
    add("--run-dir", default=default(None), help="output folder (default: runs/<agent>-<env>-s<seed>-<time>)")
    add(
        "--dataset",
        default=default(None),
        metavar="PATH",
        help="a Minari dataset (a local directory, as shoal record or minari's DataCollector writes it) "
        "whose episodes fill replay once: all that bc, cql and iql train on (no actors; their --max-env-steps "
        "and --eval-every count learner steps), a seed of replay for dqn and sac (the offline extra)",
    )
    add(
        "--record-dataset",
        default=default(None),
        metavar="DIR",
        help="write every whole episode the run's actor plays (exploring as it trains) as a Minari dataset "
        "in DIR (new) at the run's end: what --dataset reads (one-process runs; the offline extra)",
    )
    add(
        "--preset",
        default=default("auto"),
        metavar="NAME",
        help="tuned settings for a task family "
        "(agent and experiment settings; the --max-env-steps, --num-envs, --eval-every and "
        "--eval-episodes you give override them): auto (default: the family of --env), none (the "
        f"agent's plain defaults), one of {_presets_text()}, or a preset FILE (.json, e.g. the "
        "best_preset.json shoal tune writes)",
    )
    add(
        "--set",
        dest="overrides",
        action="append",
        type=flag_values.parse_override,
        default=default([]),
        metavar="KEY=VALUE",
        help="override an agent setting, after the preset, e.g. --set "
        "learning_rate=3e-4 (repeatable; see the agent's config dataclass)",
    )
    add(
        "--launcher",
        choices=["processes", "inprocess", "ray", "anakin"],
        default=default(None),
        help="run as a distributed program: one process per node, one thread per node (for "
        "debugging), or one Ray actor per node; or anakin: env, policy and the update (PPO, DQN, SAC) compiled "
        "into one function on this machine's devices, for a JAX env (gymnax:<Id>; docs/anakin.md). "
        "Default: the single-process runner, or anakin for a JAX env",
    )
    add(
        "--num-actors",
        type=flag_values.parse_num_actors,
        default=default(4),
        help="actor nodes of a distributed "
        "program (default: 4; change it while the program runs with `shoal scale RUN_DIR --actors N`), or "
        "auto / auto:MIN-MAX: add an actor while the learner waits for samples and the machine has room, "
        "remove one while actors are blocked on inserts (auto: from 1 to the machine's cores)",
    )
    add(
        "--ray-address",
        default=default(None),
        help="the Ray cluster to join (auto, or HOST:PORT); "
        "default: start a local Ray instance with this machine's CPUs",
    )
    add(
        "--resources",
        action="append",
        type=flag_values.parse_resources,
        default=default([]),
        metavar="GROUP:NAME=VALUE,...",
        help="what each node of a group asks of the Ray cluster: "
        "num_cpus, num_gpus, memory (bytes) or a custom resource, e.g. --resources learner:num_gpus=1 "
        "--resources actor:actor_host=1 (repeatable)",
    )
    add(
        "--ports",
        type=flag_values.parse_ports,
        default=default(None),
        metavar="FIRST-LAST",
        help="the ports the nodes' servers (RPC, Reverb) listen on, each the first free one of the "
        "range on its host, so the range holds at least one port per server (4 + the actors; checked); "
        "allow this range between the hosts of a cluster (default: any free port; with --launcher ray "
        "47000-47099)",
    )
    add(
        "--params-via",
        choices=["auto", "rpc"],
        default=default("auto"),
        help="how actors and the "
        "evaluator read the learner's parameters: auto (shared memory on the learner's host, RPC "
        "elsewhere; default) or rpc (RPC everywhere)",
    )
    add(
        "--dry-run",
        action="store_true",
        default=default(False),
        help="check everything a run checks (settings, SHOAL_* variables, memory, --ports, --resources; "
        "not the Ray cluster), print the resolved config (JSON) and the distributed program's graph "
        "(nodes, groups, edges), and exit",
    )
    add(
        "--checkpoint-every",
        type=float,
        default=default(300.0),
        metavar="SECONDS",
        help="seconds between checkpoints in the run directory (default: 300); one is also taken "
        "at the end and on SIGTERM",
    )
    add(
        "--resume",
        default=default(None),
        metavar="RUN_DIR",
        help="continue the run in RUN_DIR from its "
        "last checkpoint, with its saved settings (learner, replay, counters, schedules and RNG are "
        "restored); --max-env-steps may set a new budget. RUN_DIR must be yours and writable by you "
        "alone, and a resume imports nothing only RUN_DIR names: an --env-factory, a module:EnvId "
        "--env, an --agent that is not built in or a --ray-address its config.json records is used "
        "only if given again with the same value, or with --trust-run-dir",
    )
    add(
        "--trust-run-dir",
        action="store_true",
        default=default(False),
        help="with --resume: import and "
        "call what RUN_DIR's config.json names (env factory, env module, agent plug-in, Ray address) "
        "without naming it again; only for a directory whose every writer you trust",
    )
    add("--quiet", action="store_true", default=default(False), help="no progress line")
    add(
        "--verbose",
        action="store_true",
        default=default(False),
        help="keep native libraries' log lines (Reverb's, TensorFlow's) on stderr",
    )
    for name, text in (
        ("scale", "grow or shrink the actors of a running distributed program"),
        (
            "status",
            "show where a run stands: a running distributed program's node table, then, "
            "for any run, its steps, last evaluation, checkpoint and logs",
        ),
    ):
        command = sub.add_parser(name, help=text, description=text.capitalize() + ".")
        command.add_argument("run_dir", help="the program's run directory (its --run-dir)")
        if name == "scale":
            command.add_argument("--actors", type=int, required=True, help="actors to run from now on")
    text = "evaluate a run's trained policy: episodes on its env, one JSON line of return and length statistics"
    evaluate = sub.add_parser(
        "evaluate",
        help=text,
        description=text.capitalize() + " (greedy unless --sample). "
        "Reads the run's last complete checkpoint (or --checkpoint), live runs included.",
    )
    evaluate.add_argument("run_dir", help="the run directory (its --run-dir)")
    evaluate.add_argument(
        "--episodes",
        type=int,
        default=10,  # (bounds: trained.MAX_EPISODES, ENVS_AT_ONCE)
        help="episodes, run side by side, 256 at a time (default 10, at most 100,000)",
    )
    evaluate.add_argument(
        "--checkpoint",
        type=int,
        default=None,
        metavar="STEP",
        help="a learner checkpoint's env step (in RUN_DIR/checkpoints/learner; default: the last)",
    )
    evaluate.add_argument(
        "--seed",
        type=int,
        default=None,
        help="the episodes' seed, >= 0: episode i is reset with seed + i, at most 2**31 - 1 "
        "(default: a fresh one, printed); a --launcher anakin run's: the 256 episodes from episode i play "
        "from PRNGKey(seed + i) in its compiled evaluation, so its own evaluation k comes back with --seed "
        "RUN_SEED + 1000003 + 7919 k (docs/anakin.md)",
    )
    evaluate.add_argument("--sample", action="store_true", help="act as in training (sampled), not greedily")
    evaluate.add_argument(
        "--env-arg",
        dest="env_args",
        action="append",
        type=flag_values.parse_env_arg,
        default=[],
        metavar="KEY=VALUE",
        help="change an argument of the run's env (repeatable)",
    )
    _code_flags(evaluate)
    text = (
        "export a run's trained policy as a file JAX runs without Shoal (jax.export; it loads with pip install "
        "jax flatbuffers absl-py), with FILE.json beside it, or as an ONNX model (--format onnx)"
    )
    export = sub.add_parser(
        "export",
        help=text,
        description=text.capitalize() + ". Greedy; feed-forward policies. "
        "Reads the run's last complete checkpoint (or --checkpoint); prints one JSON line.",
    )
    export.add_argument("run_dir", help="the run directory (its --run-dir)")
    export.add_argument(
        "--out",
        required=True,
        metavar="FILE",
        help="the file to write (and FILE.json): not in a run directory, not a symbolic link",
    )
    export.add_argument(
        "--checkpoint",
        type=int,
        default=None,
        metavar="STEP",
        help="a learner checkpoint's env step (in RUN_DIR/checkpoints/learner; default: the last)",
    )
    export.add_argument(
        "--batch-size",
        type=int,
        default=None,
        metavar="N",
        help="the one batch size the exported function takes (default: any)",
    )
    export.add_argument(
        "--format",
        choices=("jax", "onnx"),
        default=None,
        help="jax: jax.export's file (and FILE.json); onnx: an ONNX model, its specs in its metadata "
        "(Python 3.12+, the onnx extra); default: onnx for a FILE ending in .onnx, else jax",
    )
    _code_flags(export)
    text = "record a run's policy playing its env as a Minari dataset (an offline-RL dataset minari reads)"
    record = sub.add_parser(
        "record",
        help=text,
        description=text.capitalize() + ". Greedy (or --sample, or --epsilon of random actions); reads "
        "the run's last complete checkpoint (or --checkpoint); prints one JSON line. Needs the offline extra.",
    )
    record.add_argument("run_dir", help="the run directory (its --run-dir)")
    record.add_argument("--episodes", type=int, required=True, metavar="N", help="episodes to record")
    record.add_argument(
        "--out", required=True, metavar="DIR", help="the dataset's directory: new, not in a run directory"
    )
    record.add_argument(
        "--dataset-id", default=None, metavar="ID", help="the Minari dataset id (default: DIR's name, -v0 added)"
    )
    record.add_argument("--epsilon", type=float, default=0.0, help="the share of uniformly random actions (default: 0)")
    record.add_argument("--sample", action="store_true", help="sample as the actors did, not greedily")
    record.add_argument("--seed", type=int, default=0, help="the envs' and the draws' seed (default: 0)")
    record.add_argument(
        "--checkpoint",
        type=int,
        default=None,
        metavar="STEP",
        help="a learner checkpoint's env step (in RUN_DIR/checkpoints/learner; default: the last)",
    )
    _code_flags(record)
    text = "compare runs: curves per task, and final returns over seeds (IQM, optimality gap, bootstrap intervals)"
    compare = sub.add_parser(
        "compare",
        help=text,
        description=text.capitalize() + ". Prints a markdown table; "
        "writes it, summary.json and a PNG and SVG plot per task to --out.",
    )
    compare.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run directories (each a seed of its group)")
    compare.add_argument(
        "--by",
        default="agent",
        help="group runs by agent (default), preset, or any setting of "
        "their config.json (e.g. num_envs, learning_rate)",
    )
    compare.add_argument(
        "--out",
        default=os.path.join("runs", "compare"),
        help="where to write the table and plots (default: runs/compare, never an input itself)",
    )
    compare.add_argument(
        "--bootstrap-samples", type=int, default=2000, help="resamples per interval, 1 to 100,000 (default 2000)"
    )

    add_tune_parser(sub)  # (shoal tune: its flags live with it)
    return parser


def _code_flags(command: argparse.ArgumentParser) -> None:
    """The flags that name again the code a run directory names (as for ``--resume``)."""
    for flag, what in (
        ("--agent", "the run's plug-in agent"),
        ("--env-factory", "the run's env factory"),
        ("--env", "the run's module:EnvId"),
    ):
        command.add_argument(
            flag,
            dest=flag[2:].replace("-", "_") if flag != "--env" else "env_id",
            default=None,
            help=f"{what}, named again to use it (as for --resume)",
        )
    command.add_argument(
        "--trust-run-dir", action="store_true", help="use what RUN_DIR's config.json names without naming it again"
    )


def given_flags(argv: Sequence[str]) -> list[str]:
    """The ``shoal train`` options ``argv`` gives (as their flags, e.g. ``--set``), whatever
    their values: ``argv`` parsed again with every default suppressed holds only those."""
    parser = build_parser(suppress_defaults=True)
    return [parser.train_flags[dest] for dest in vars(parser.parse_args(argv)) if dest in parser.train_flags]
