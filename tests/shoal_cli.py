"""Starting the real CLI, ``python -m shoal ARGS...``, in a subprocess: the command, a run of
it that fails with where it hung when it times out, and a started process."""

import os
import subprocess
import sys
from collections.abc import Sequence

STDERR_TAIL_CHARS = 3000
LOG_TAIL_LINES = 15


def shoal_command(*args: str, python_args: Sequence[str] = ()) -> list[str]:
    """``[python, *python_args, "-m", "shoal", *args]`` (``python_args``: interpreter flags such
    as ``-X ...``, or a wrapper such as ``tests.faults.harness.DEFAULT_SIGINT``)."""
    return [sys.executable, *python_args, "-m", "shoal", *args]


def run_shoal(*args: str, timeout: float, python_args: Sequence[str] = (), **kwargs) -> subprocess.CompletedProcess:
    """Runs ``shoal ARGS...`` to its end, its output captured as text. One that runs past
    ``timeout`` seconds fails (``AssertionError``) with the command, the end of its stderr and,
    for a run directory it names (``--run-dir`` or ``--resume``), the end of each node's log."""
    cmd = shoal_command(*args, python_args=python_args)
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kwargs)
    except subprocess.TimeoutExpired as e:
        raise AssertionError(timeout_report(cmd, timeout, e.stderr, cwd=kwargs.get("cwd"))) from None


def start_shoal(*args: str, python_args: Sequence[str] = (), **popen_kwargs) -> subprocess.Popen:
    """``shoal ARGS...`` started (``popen_kwargs`` go to ``subprocess.Popen``)."""
    return subprocess.Popen(shoal_command(*args, python_args=python_args), **popen_kwargs)


def timeout_report(
    cmd: Sequence[str], timeout: float, stderr: bytes | str | None, cwd: str | os.PathLike | None = None
) -> str:
    """What a timed-out ``cmd`` (run in ``cwd``) leaves to go on: the command, its stderr's end,
    and its nodes' logs' ends."""
    if isinstance(stderr, bytes):
        stderr = stderr.decode(errors="replace")
    lines = [
        f"timed out after {timeout}s: {' '.join(map(str, cmd))}",
        f"--- stderr (last {STDERR_TAIL_CHARS} characters) ---",
        (stderr or "(none)")[-STDERR_TAIL_CHARS:],
    ]
    for run_dir in run_dirs(cmd):
        log_dir = os.path.join(cwd, run_dir, "logs") if cwd else os.path.join(run_dir, "logs")  # (cwd's, if relative)
        try:
            logs = sorted(os.path.join(log_dir, name) for name in os.listdir(log_dir) if name.endswith(".log"))
        except OSError:
            logs = []
        if not logs:
            lines.append(f"--- no logs in {log_dir} ---")
        for path in logs:
            lines.append(f"--- {path} (last {LOG_TAIL_LINES} lines) ---")
            try:
                with open(path, errors="replace") as f:
                    lines.extend(line.rstrip("\n") for line in f.readlines()[-LOG_TAIL_LINES:])
            except OSError as e:
                lines.append(f"(unreadable: {e})")
    return "\n".join(lines)


def run_dirs(cmd: Sequence[str]) -> list[str]:
    """The directories ``cmd`` names with ``--run-dir X``/``--resume X`` (or ``--run-dir=X``)."""
    out = []
    for i, arg in enumerate(cmd):
        arg = str(arg)
        for flag in ("--run-dir", "--resume"):
            if arg == flag and i + 1 < len(cmd):
                out.append(str(cmd[i + 1]))
            elif arg.startswith(flag + "="):
                out.append(arg[len(flag) + 1 :])
    return out
