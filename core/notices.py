"""A line on the terminal while something slow runs, so that a long wait never looks like a hang.

``while_slow(what, stream)`` is a context manager: if its block is still running after
``after_s`` seconds, a background thread prints ``[train] still compiling ... (N s)`` lines
every ``every_s`` seconds; when the block ends after such a line, one last line says how long
it took. A block that ends sooner prints nothing.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import TextIO

COMPILE_HINT = (
    "; an agent's first run compiles its update (minutes for a convolutional network on a CPU), "
    "later runs load it from the compilation cache"
)


@contextlib.contextmanager
def while_slow(
    what: str, stream: TextIO, label: str = "train", after_s: float = 5.0, every_s: float = 15.0, hint: str = ""
) -> Iterator[None]:
    """Prints ``[label] still <what> (N s)<hint>`` while the block runs past ``after_s``."""
    started, done, said = time.monotonic(), threading.Event(), threading.Event()

    def watch() -> None:
        wait = after_s
        while not done.wait(wait):
            print(f"[{label}] still {what} ({time.monotonic() - started:.0f} s){hint}", file=stream, flush=True)
            said.set()
            wait = every_s

    watcher = threading.Thread(target=watch, name="slow-notice", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        watcher.join()
        if said.is_set():
            print(f"[{label}] done {what} in {time.monotonic() - started:.1f} s", file=stream, flush=True)
