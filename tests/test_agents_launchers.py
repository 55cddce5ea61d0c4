"""Every agent runs as a distributed program, under both launchers, to its final JSON line."""

import json
import os

import pytest

from tests.shoal_cli import run_shoal

pytestmark = pytest.mark.e2e  # every agent trained by `shoal train` under every launcher

# Small settings so that each run takes seconds on 2 cores (the learning itself is tested elsewhere).
AGENTS = {
    "dqn": ("CartPole-v1", ["min_replay_size=256"]),
    "ppo": ("CartPole-v1", ["rollout_length=16"]),
    "impala": ("CartPole-v1", ["rollout_length=8", "sequences_per_update=16"]),
    "r2d2": ("shoal/CartPoleNoVelocity-v1", ["min_replay_size=64", "lstm_size=16"]),
    "sac": ("Pendulum-v1", ["hidden_sizes=32,32", "batch_size=64", "min_replay_size=256", "samples_per_insert=16"]),
}
BUDGET = 2_048
ONE_ACTOR = {"sac", "r2d2"}  # (replay agents like DQN, which runs two: one actor each saves CI time)


@pytest.mark.parametrize("launcher", ["processes", "inprocess"])
@pytest.mark.parametrize("agent", sorted(AGENTS))
def test_agent_runs_under_launcher(agent, launcher, tmp_path, request):
    if launcher == "inprocess" and agent != "dqn" and "slow" not in (request.config.getoption("markexpr") or ""):
        pytest.skip(
            "the thread launcher runs the program the processes launcher runs: dqn here, "
            "every agent with -m 'slow or not slow'"
        )
    if agent == "r2d2" and "slow" not in (request.config.getoption("markexpr") or ""):
        pytest.skip(
            "R2D2's program is DQN's with another table (CI time): every launcher with -m 'slow or not slow'; "
            "tests/test_r2d2.py trains it in one process"
        )
    env_id, settings = AGENTS[agent]
    num_actors = 1 if agent in ONE_ACTOR else 2
    args = [
        "train",
        "--agent",
        agent,
        "--env",
        env_id,
        "--launcher",
        launcher,
        "--num-actors",
        str(num_actors),
        "--num-envs",
        "8",
        "--seed",
        "0",
        "--max-env-steps",
        str(BUDGET),
        "--eval-every",
        str(BUDGET),
        "--eval-episodes",
        "2",
        "--target-return",
        "1e9",
        "--quiet",
        "--run-dir",
        str(tmp_path / "run"),
    ]
    for setting in settings:
        args += ["--set", setting]
    ports = agent == "dqn" and launcher == "processes"  # (one run checks --ports and --params-via)
    if ports:
        args += ["--ports", "47300-47399", "--params-via", "rpc"]
    proc = run_shoal(*args, timeout=300, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["agent"] == agent and result["launcher"] == launcher
    assert result["env_steps"] >= BUDGET and result["final_eval_return"] is not None, result
    assert result["process_s"] >= result["wall_s"] > 0  # (the whole command, and the run in it)
    if agent != "impala":
        # The table makes actors wait for the learner (replay ratio, or a full queue), so the
        # budget cannot run out before it learned. IMPALA's actors never wait: by design, its
        # budget may be spent before the learner's first update; its learning is benchmarked.
        assert result["learner_steps"] > 0, result
    # Where each node's time went: shares of its own wall time, the rest as "other".
    times = result["time_breakdown"]
    assert set(times) == {"learner", "evaluator", *(f"actor_{i}" for i in range(num_actors))}, times
    for _node, shares in times.items():
        assert all(0 <= share <= 1 for share in shares.values()) and abs(sum(shares.values()) - 1) < 0.02, times
    assert {"env_step", "policy", "replay_insert"} <= set(times["actor_0"]) and times["evaluator"]["evaluation"] > 0
    actor_log = (tmp_path / "run" / "logs" / "actor_0.log").read_text() if launcher == "processes" else ""
    if launcher == "processes" and not ports:  # (the default on one machine)
        assert "[actor_0] reads parameters from shared memory" in actor_log
    if ports:  # every server on a port of the range; actors read the parameters over RPC
        addresses = os.listdir(tmp_path / "run" / "addresses")
        assert {"replay", "learner", "counter", "evaluator"} <= set(addresses), addresses
        for name in addresses:
            assert 47300 <= int((tmp_path / "run" / "addresses" / name).read_text().rsplit(":", 1)[1]) <= 47399
        assert "reads parameters over RPC" in actor_log
