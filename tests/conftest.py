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
                  "test_variable_client.py", "test_portable.py"}
HAS_REVERB = importlib.util.find_spec("reverb") is not None


def pytest_ignore_collect(collection_path, config):
    if HAS_REVERB:
        return None
    if collection_path.is_dir():
        return collection_path.name == "faults" or None
    return collection_path.suffix == ".py" and collection_path.name.startswith("test_") \
        and collection_path.name not in WITHOUT_REVERB or None
