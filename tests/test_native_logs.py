"""Native libraries' log lines (Reverb's ``[reverb/cc/...]``, TensorFlow's timestamped ``I``/``W``
lines) stay off the terminal of a run made from Python, as ``shoal train`` keeps them off its own;
every other line passes, in order, and the real stderr is back when the run returns."""

import json
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.e2e


def _python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300)


def test_the_filter_drops_native_lines_only_for_its_block_and_keeps_the_others_in_order():
    done = _python("""
        import os, sys
        from shoal.core.native_log_filter import keep_native_log_lines, native_log_lines_dropped

        with native_log_lines_dropped():
            os.write(2, b"one\\n[reverb/cc/platform/default/server.cc:71] Started replay server on port 1\\n")
            print("two", file=sys.stderr, flush=True)
            os.write(2, b"2026-01-01 12:00:00.000000: W external/tf.cc:1] a warning\\nthree\\n")
        os.write(2, b"[reverb/cc/after.cc:1] shown: the block ended\\n")
        keep_native_log_lines()
        with native_log_lines_dropped():
            os.write(2, b"[reverb/cc/verbose.cc:1] shown: kept\\n")
    """)
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == [
        "one",
        "two",
        "three",
        "[reverb/cc/after.cc:1] shown: the block ended",
        "[reverb/cc/verbose.cc:1] shown: kept",
    ]


def test_a_python_api_run_on_reverb_prints_none_of_reverbs_lines(tmp_path):
    pytest.importorskip("reverb")
    done = _python(f"""
        import sys
        from shoal.launch import run_experiment
        from shoal.launch.experiments.config import experiment_config

        config = experiment_config("dqn", "CartPole-v1", max_env_steps=1_500, num_envs=8, eval_every=1_000,
                                   eval_episodes=2, run_dir={str(tmp_path / "run")!r}, progress=False, replay="reverb")
        print("env steps", run_experiment(config)["env_steps"], file=sys.stderr)
    """)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "[reverb/cc/" not in done.stderr, done.stderr[-3000:]
    assert done.stderr.splitlines()[-1] == "env steps 1504", done.stderr[-3000:]


@pytest.mark.ray
@pytest.mark.timeout(600)
def test_a_run_under_a_local_ray_shows_shoals_lines_only(tmp_path):
    """Ray's note that its local instance uses token authentication, its driver's ``core_worker.cc``
    note per restartable node, and a second local Ray that a progress tick started once the
    program had shut the first down (``Started a local Ray instance``, after the run) stay off
    the terminal; ``shoal status`` and ``shoal evaluate`` read the finished run."""
    pytest.importorskip("ray")
    from tests.faults.harness import SMALL
    from tests.shoal_cli import run_shoal

    proc = run_shoal(
        "train",
        *SMALL,
        "--launcher",
        "ray",
        "--num-actors",
        "1",
        "--max-env-steps",
        "3000",
        "--run-dir",
        str(tmp_path / "run"),
        timeout=500,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    for line in proc.stderr.splitlines():
        assert not any(
            text in line
            for text in (
                "Token authentication",
                "constructor arguments in the object store",
                "Started a local Ray",
                "os.fork()",
            )
        ), proc.stderr[-3000:]
    # (issue 39: status and evaluate on a finished Ray run)
    status = run_shoal("status", str(tmp_path / "run"), timeout=120)
    assert status.returncode == 0 and "(ray launcher, 1 actors" in status.stdout and "state: ended" in status.stdout, (
        status.stdout + status.stderr
    )
    evaluated = run_shoal("evaluate", str(tmp_path / "run"), "--episodes", "2", timeout=300)
    assert evaluated.returncode == 0, evaluated.stderr[-2000:]
    assert json.loads(evaluated.stdout.splitlines()[-1])["episodes"] == 2
