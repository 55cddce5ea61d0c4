import importlib.util
import os
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# The CLI caches compiled JAX code; the suite uses a cache of its own, never the user's.
os.environ.setdefault("SHOAL_COMPILATION_CACHE", tempfile.mkdtemp(prefix="shoal-test-jax-cache-"))

# Every test runs on every Python: a run, a server or a dataset a test makes without naming a
# backend uses this Python's default (Reverb where it is installed, native elsewhere), and the
# few tests of Reverb's own pieces skip themselves where it is not (pytest.importorskip).


def pytest_collection_modifyitems(config, items):
    """``slow`` tests run only when ``-m`` names them (``-m slow``, ``-m "slow or not slow"``): the
    plain command leaves them out, and so does ``-m "not e2e"``, which an ``-m 'not slow'`` in
    addopts could not do (the last ``-m`` wins).

    ``ray`` tests (programs under the Ray launcher, ~6 min of one worker) run by default where
    Reverb is not installed (Python 3.12+: CI's second stage); where it is (3.11), only when
    ``-m`` names ``ray`` or ``slow``. The Ray launcher's code does not depend on the replay
    backend or the JAX version, and so CI (both stages) stays under 45 minutes."""
    markexpr = config.getoption("markexpr") or ""
    if "slow" in markexpr:
        return
    if "ray" not in markexpr and importlib.util.find_spec("reverb") is not None:
        ray = [item for item in items if item.get_closest_marker("ray")]
        if ray:
            config.hook.pytest_deselected(items=ray)
            items[:] = [item for item in items if not item.get_closest_marker("ray")]
    slow = [item for item in items if item.get_closest_marker("slow")]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if not item.get_closest_marker("slow")]
