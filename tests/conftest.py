import contextlib
import importlib.util
import itertools
import os
import re
import tempfile

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# As shoal's RPC package sets it, before a test imports grpc itself (its docstring says why).
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

# Compiled JAX code is cached on disk (JAX's persistent cache, keyed by the computation, the JAX
# version and XLA's flags), in this process and every process a test starts: a later session
# loads what an earlier one compiled instead of compiling it again (docs/testing.md). The suite
# uses a cache of its own, never the user's runs' (``~/.cache/shoal/jax``):
# ``SHOAL_TEST_COMPILATION_CACHE`` names it (default ``~/.cache/shoal/jax-tests``), or ``off``
# for a fresh one per session (as a clean CI machine has).
SUITE_CACHE_MAX_BYTES = 1 << 30  # (past this size at a session's start, the oldest half goes)


def _suite_compilation_cache() -> str:
    chosen = os.environ.get("SHOAL_TEST_COMPILATION_CACHE", "")
    if chosen.lower() == "off":
        return tempfile.mkdtemp(prefix="shoal-test-jax-cache-")
    if chosen:
        return chosen
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "shoal", "jax-tests")


def _prune(directory: str, max_bytes: int = SUITE_CACHE_MAX_BYTES) -> None:
    """Past ``max_bytes``, the cache's oldest files go until it holds half that. (Here, once a
    session, not JAX's own LRU: that locks and lists the directory at every entry it writes, which
    cost a cold run of the fast layer ~30 s of system time.)"""
    try:
        files = [(e.stat().st_mtime, e.stat().st_size, e.path) for e in os.scandir(directory) if e.is_file()]
    except FileNotFoundError:
        return
    total = sum(size for _, size, _ in files)
    if total <= max_bytes:
        return
    for _, size, path in sorted(files):  # (oldest first)
        if total <= max_bytes // 2:
            break
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)
        total -= size


os.environ.setdefault("SHOAL_COMPILATION_CACHE", _suite_compilation_cache())

# Every test runs on every Python: a run, a server or a dataset a test makes without naming a
# backend uses this Python's default (Reverb where it is installed, native elsewhere), and the
# few tests of Reverb's own pieces skip themselves where it is not (pytest.importorskip).


FAST_LAYER_XLA_FLAG = "--xla_backend_optimization_level=0"


def pytest_configure(config):
    """The fast layer (an ``-m`` that leaves out every e2e test: ``-m "not e2e"``) compiles with XLA's backend optimisation off: its tests
    check what a computation gives, never how fast it runs, and most of its time was the
    compiler's (every fast test passes either way; the whole suite, e2e included, compiles as a
    user's run does). ``XLA_FLAGS`` naming a level of its own keeps that level. Set here, before
    this process's first JAX computation starts the backend (the processes a test starts inherit it).
    Then JAX's persistent cache is turned on in this process (the suite's cache, above)."""
    if _leaves_out_e2e(config.getoption("markexpr") or ""):
        flags = os.environ.get("XLA_FLAGS", "")
        if "xla_backend_optimization_level" not in flags:
            os.environ["XLA_FLAGS"] = f"{flags} {FAST_LAYER_XLA_FLAG}".strip()
    from shoal.launch.experiments.compilation_cache import enable_compilation_cache

    directory = enable_compilation_cache()  # (this process too, as `shoal train` does)
    if directory is not None:
        _prune(directory)


def _leaves_out_e2e(markexpr: str) -> bool:
    """Whether ``-m markexpr`` selects no test marked ``e2e``, whatever its other marks."""
    if not markexpr:
        return False
    from _pytest.mark.expression import Expression

    expression = Expression.compile(markexpr)
    others = sorted(set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", markexpr)) - {"e2e", "and", "or", "not"})
    return not any(
        expression.evaluate(lambda name, marks=marks, **_: name == "e2e" or name in marks)
        for marks in (set(itertools.compress(others, bits)) for bits in itertools.product((0, 1), repeat=len(others)))
    )


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


@pytest.fixture(scope="session")
def finished_dqn_run(tmp_path_factory):
    """A real one-process DQN run on CartPole that ended with a checkpoint (made from Python),
    trained once per session for the tests that resume or refuse it; a test copies it before it
    changes anything there (``shutil.copytree``), so each one sees it as it was written."""
    from shoal.agents import get_builder
    from shoal.launch import ExperimentConfig, run_experiment

    run_dir = tmp_path_factory.mktemp("finished-dqn") / "run"
    run_experiment(
        ExperimentConfig.from_flat(
            builder=get_builder("dqn", min_replay_size=100),
            env_id="CartPole-v1",
            num_envs=4,
            max_env_steps=400,
            eval_every=400,
            eval_episodes=2,
            target_return=1e9,
            run_dir=str(run_dir),
            progress=False,
        )
    )
    return run_dir
