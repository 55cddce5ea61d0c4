"""Waiting on an event, with a timeout that says what was waited for."""

import time


def wait_for(predicate, timeout_s, what):
    """Polls ``predicate`` until it returns something truthy (returned), or fails after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
