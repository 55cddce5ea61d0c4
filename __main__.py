"""``python -m shoal ...`` and the ``shoal`` executable: the ``shoal`` command line.

SIGINT and SIGTERM are taken before anything else is imported: until the command line's own
handlers are in place (``shoal.launch.experiments.interrupts``), nothing has been written and
no process started, so a signal ends ``shoal`` at once with 130 / 143 and one line.
"""

import os
import signal
import sys


def _leave(signum: int, frame: object) -> None:
    sys.stderr.write("shoal: interrupted\n" if signum == signal.SIGINT else "shoal: terminated\n")
    sys.stderr.flush()
    os._exit(128 + signum)


def entry() -> None:
    for sig in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(sig) is not signal.SIG_IGN:  # (started with Ctrl-C ignored: kept so)
            signal.signal(sig, _leave)
    from shoal.launch.experiments.cli.main import entry as cli_entry  # lazy: after the signal handlers

    cli_entry()


if __name__ == "__main__":
    entry()
