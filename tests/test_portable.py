"""What runs without Reverb and TensorFlow (a Python 3.12 machine with today's JAX, a GPU
machine): the agents' learning code, networks and the learner import without them, and the
learner benchmark runs on synthetic batches through each agent's builder."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FORBIDDEN = ("reverb", "tensorflow", "tensorflow_probability", "distrax", "rlax")


def test_the_learning_code_imports_without_reverb_or_tensorflow():
    code = (
        "import sys\n"
        "import shoal.learners, shoal.agents.impala.learning, shoal.agents.ppo.learning\n"
        "import shoal.agents.dqn.learning, shoal.agents.sac.learning, shoal.agents.registry\n"
        "import shoal.agents.dqn.builder, shoal.agents.ppo.networks, shoal.replay.layouts\n"
        f"print(sorted(m for m in {FORBIDDEN!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"


@pytest.mark.e2e  # (the learner benchmark run for every agent: ~25 s)
def test_the_learner_benchmark_feeds_every_agent_without_a_replay_server():
    proc = subprocess.run(
        [
            sys.executable,
            os.path.join(ROOT, "benchmarks", "learner_bench.py"),
            "--in-memory",
            "--configs",
            "default",
            "--seconds",
            "0.2",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(out["results"]) == {"dqn", "ppo", "impala", "sac"} and out["devices"]
    for agent, configs in out["results"].items():
        r = configs["default"]
        assert r["updates_per_s"]["fed"] > 0 and r["updates_per_s"]["in_memory"] > 0, (agent, r)
        # every fed update took JAX's C++ dispatch path (an H100 once missed it on every update)
        assert r["python_dispatches_per_update"] == 0, (agent, r)
    assert "| dqn | default |" in proc.stderr
