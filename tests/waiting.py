"""Waiting on an event, with a timeout that says what was waited for, and reading the CSV
rows a run writes (what tests wait on)."""

import csv
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


def csv_rows(path):
    """The rows of the CSV at ``path`` (dicts), or ``[]`` while it does not exist."""
    try:
        with open(path) as f:
            return list(csv.DictReader(f))
    except FileNotFoundError:
        return []
