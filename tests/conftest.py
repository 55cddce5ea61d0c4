import importlib.util
import os
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# The CLI caches compiled JAX code; the suite uses a cache of its own, never the user's.
os.environ.setdefault("SHOAL_COMPILATION_CACHE", tempfile.mkdtemp(prefix="shoal-test-jax-cache-"))

# Where Reverb is not installed (Python 3.12+ with today's JAX, e.g. a GPU machine), the same test
# command runs the tests of what runs there: the learners, the agents' update math, V-trace and
# GAE, the networks, the actor's parameter client, the learner benchmark. The rest need a replay
# server (or a training run, which needs one).
WITHOUT_REVERB = {"test_returns.py", "test_vtrace.py", "test_learner_pmap.py", "test_checkpoint.py",
                  "test_variable_client.py", "test_portable.py",
                  # the unit layer: settings, specs, counter, codec, registry, presets, launch tables
                  "test_unit_core.py", "test_unit_codec.py", "test_unit_agents.py", "test_unit_launch.py",
                  # memory: the recurrent core, the unrolls, R2D2's targets and priorities, h and h^-1
                  "test_recurrent_core.py", "test_recurrent_ppo.py", "test_r2d2.py", "test_value_rescaling.py"}
HAS_REVERB = importlib.util.find_spec("reverb") is not None


def pytest_ignore_collect(collection_path, config):
    if HAS_REVERB:
        return None
    if collection_path.is_dir():
        return collection_path.name == "faults" or None
    return collection_path.suffix == ".py" and collection_path.name.startswith("test_") \
        and collection_path.name not in WITHOUT_REVERB or None


def pytest_collection_modifyitems(config, items):
    """``slow`` tests run only when ``-m`` names them (``-m slow``, ``-m "slow or not slow"``): the
    plain command leaves them out, and so does ``-m "not e2e"``, which an ``-m 'not slow'`` in
    addopts could not do (the last ``-m`` wins)."""
    if "slow" in (config.getoption("markexpr") or ""):
        return
    slow = [item for item in items if item.get_closest_marker("slow")]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if not item.get_closest_marker("slow")]
