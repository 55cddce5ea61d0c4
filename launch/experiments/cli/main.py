"""The ``shoal`` command line: running a command, exit codes, and a prompt exit (its arguments
are parsed by ``shoal.launch.experiments.cli.arguments``).

    shoal train --agent dqn --env CartPole-v1 --seed 0       # one process (see commands.train)
    shoal train ... --launcher processes --num-actors 4       # a distributed program
    shoal train --resume RUN_DIR                              # continue a run
    shoal scale RUN_DIR --actors 8 / shoal status RUN_DIR     # a running distributed program
    shoal evaluate RUN_DIR --episodes 20                      # a trained policy, on its env
    shoal export RUN_DIR --out policy.jax                     # ... as a file JAX runs without Shoal

A training run ends with one JSON line on stdout. Bad settings exit with status 2 and one
``shoal: error: ...`` line before anything is written (``--verbose`` prints the traceback of
what caused it first, e.g. a plug-in builder's exception); a failed run with status 1 and one line;
Ctrl-C with 130; SIGTERM with the JSON line and 143.
"""

from __future__ import annotations

import errno
import os
import sys
import threading
import time
import traceback
from collections.abc import Sequence
from typing import Any, NoReturn

from shoal.core.files import json_text
from shoal.core.native_log_filter import restore_stderr
from shoal.launch.experiments import interrupts
from shoal.launch.experiments.cli.arguments import build_parser, given_flags
from shoal.launch.experiments.interrupts import EXIT_CODES
from shoal.launch.experiments.tune.command import tune_command

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


def main(argv: Sequence[str] | None = None, own_process: bool = False) -> int:
    """Runs one ``shoal`` command; returns its exit status. ``own_process``: this process is
    the ``shoal`` executable (it takes SIGINT and SIGTERM, see ``interrupts``, and may take over
    file descriptor 2 to filter native log lines)."""
    if own_process and "" not in sys.path and os.getcwd() not in sys.path:
        # (``--agent my_module:MyBuilder`` or ``--env-factory my_envs:make`` from the directory the
        # user stands in, as ``python -m shoal`` finds it; last on the path: it shadows nothing)
        sys.path.append(os.getcwd())
    stop = interrupts.install() if own_process else None
    try:
        return _main(argv, own_process, stop)
    except interrupts.Interrupted as e:  # while setting up: nothing was written
        print(f"shoal: {'interrupted' if e.name == 'SIGINT' else 'terminated'}", file=sys.stderr)
        return e.exit_code
    except Exception:
        taken = interrupts.taken_while_setting_up()  # (the signal broke an import: the same leave)
        if taken is None:
            raise
        print(f"shoal: {'interrupted' if taken == 'SIGINT' else 'terminated'}", file=sys.stderr)
        return interrupts.EXIT_CODES[taken]


def _main(argv: Sequence[str] | None, own_process: bool, stop: Any) -> int:
    from shoal.launch.experiments.cli import commands  # lazy: JAX etc. once a command runs

    started = time.time()
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as e:  # --help (0), or a usage error already printed in one line (2)
        return int(e.code or 0)
    _quiet_disk_errors()
    try:
        if args.command in ("scale", "status"):
            commands.control(args)
            return 0
        if args.command == "compare":
            commands.compare(args)
            return 0
        if args.command == "evaluate":
            print(json_text(commands.evaluate(args), "the evaluation"), flush=True)
            return 0
        if args.command == "export":
            print(json_text(commands.export(args), "the export"), flush=True)
            return 0
        if args.command == "record":
            print(json_text(commands.record(args), "the recording"), flush=True)
            return 0
        if args.command == "tune":  # (its own summary line; a stop keeps the finished trials)
            summary = tune_command(args, stop)
            print(json_text(summary, "the tune's summary"), flush=True)
            return EXIT_CODES.get(summary.get("terminated"), 0)
        result = commands.train(
            args, given_flags(argv), started, filter_stderr=own_process and not args.verbose, stop=stop
        )
        if result is None:  # --dry-run
            return 0
        line = json_text(result, "the run's result")
    except ValueError as e:
        if getattr(args, "verbose", False) and e.__cause__ is not None:  # (e.g. a plug-in's factory that raised)
            traceback.print_exception(e.__cause__, file=sys.stderr)
        print(f"shoal: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("shoal: interrupted", file=sys.stderr)
        return 130
    except (TimeoutError, RuntimeError, FloatingPointError) as e:  # a node died, a NaN loss, ...
        print(f"shoal: error: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        where = e.filename or "to the run directory"
        if e.errno in DISK_FULL:
            print(
                f"shoal: error: cannot write {where}: {e.strerror} (free some space, or choose another --run-dir)",
                file=sys.stderr,
            )
        else:
            print(f"shoal: error: {where}: {e.strerror or e}", file=sys.stderr)
        return 1
    print(line, flush=True)
    terminated = result.get("terminated")
    if terminated == "SIGINT":
        print("shoal: interrupted", file=sys.stderr)
    return EXIT_CODES.get(terminated, 143 if terminated else 0)


def entry() -> NoReturn:
    """The ``shoal`` executable: ``main``, then an exit that does not wait for the interpreter
    to tear down JAX, TensorFlow, Reverb and orbax (seconds on a busy machine, after the run's
    result is out and its run directory released)."""
    code = main(own_process=True)

    sys.stdout.flush()
    restore_stderr()  # (forwards what the native-log filter still holds)
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    entry()
