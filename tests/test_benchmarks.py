"""Smoke tests of the benchmark scripts (tiny budgets): they run and print what they promise."""

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.e2e  # the benchmark scripts run as a user runs them


def script(*args, timeout=300):
    proc = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


@pytest.mark.timeout(300)
@pytest.mark.slow  # (~35 s; -m slow runs it)
def test_throughput_prints_every_figure():
    # (the learner on 2 forced devices is tested in tests/test_learner_pmap.py)
    proc = script("benchmarks/throughput.py", "--window", "0.2", "--scaling", "1", "2", "--learner-devices", "1")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert 0 < out["actor_efficiency"] <= out["actor_policy_efficiency"] < 1.5
    assert set(out["actor_scaling"]) == {"1", "2"} and out["actor_scaling"]["1"] == 1.0
    assert out["actor_scaling"]["2"] > 0
    assert set(out["learner_feed_ratio"]) == {"dqn", "ppo", "r2d2"} and "learner_feed_ratio_2_devices" not in out
    assert all(ratio > 0 for ratio in out["learner_feed_ratio"].values())
    for path in ("rpc", "rpc_grpc"):  # shared memory (actors on the learner's host), and gRPC
        assert set(out[path]) == {"1", "32"} and 0 < out[path]["1"]["p50_ms"] <= out[path]["1"]["p99_ms"]
    assert "[reverb/cc/" not in proc.stderr  # library noise stays out
    assert "failed" not in out and "Traceback" not in proc.stderr, proc.stderr[-3000:]  # (every part measured)


@pytest.mark.timeout(300)
@pytest.mark.slow  # (CI time, ~50 s: a two-seed sweep of benchmarks/solve.py; -m slow runs it)
def test_solve_writes_table_and_curves_and_resumes(tmp_path):
    args = [
        "benchmarks/solve.py",
        "--agents",
        "dqn",
        "--envs",
        "CartPole-v1",
        "--seeds",
        "0",
        "1",
        "--max-env-steps",
        "1600",
        "--out",
        str(tmp_path),
        "--",
        "--set",
        "min_replay_size=256",
        "--eval-every",
        "800",
        "--eval-episodes",
        "2",
    ]
    first = script(*args)
    summary = json.loads(first.stdout.strip().splitlines()[-1])
    assert summary["agent"] == "dqn" and summary["seeds"] == [0, 1] and summary["solved"] in ("0/2", "1/2", "2/2")
    assert 800 <= summary["median_env_steps"] <= 1600 and summary["time_breakdown"]["sgd_update"] > 0
    table = (tmp_path / "table.md").read_text()
    assert f"| dqn | CartPole-v1 | 475.0 | {summary['solved']} | " in table
    assert (tmp_path / "dqn-CartPole-v1.png").stat().st_size > 5000
    assert len((tmp_path / "runs.jsonl").read_text().splitlines()) == 2
    compared = (tmp_path / "compare" / "table.md").read_text()  # (shoal compare over the sweep's runs)
    assert "| dqn | CartPole-v1 | 2 | " in compared and (tmp_path / "compare" / "CartPole-v1.png").stat().st_size > 5000
    again = script(*args)  # a finished sweep: nothing is run again
    assert "0 to go (2 already in" in again.stderr
    assert len((tmp_path / "runs.jsonl").read_text().splitlines()) == 2


def test_the_training_return_weighs_each_row_by_the_episodes_it_counts(tmp_path):
    sys.path.insert(0, "benchmarks")
    try:
        from solve import training_return
    finally:
        sys.path.remove("benchmarks")
    (tmp_path / "train.csv").write_text(  # rows: 10 episodes of return 1, then 2 of return 4, then none
        "env_steps,episode_return,episode_length\n100,1.0,10\n200,4.0,50\n300,,\n"
    )
    assert training_return(str(tmp_path)) == pytest.approx((10 * 1.0 + 2 * 4.0) / 12)
    assert training_return(str(tmp_path), episodes=2) == pytest.approx(4.0)  # (the last 2 episodes only)
    assert training_return(str(tmp_path / "missing")) != training_return(str(tmp_path / "missing"))  # NaN


def test_the_best_eval_return_is_the_best_evaluation_of_the_run(tmp_path):
    sys.path.insert(0, "benchmarks")
    try:
        from solve import best_eval_return
    finally:
        sys.path.remove("benchmarks")
    (tmp_path / "eval.csv").write_text("env_steps,eval_return\n100,-0.5\n200,0.75\n300,0.25\n")
    assert best_eval_return(str(tmp_path)) == 0.75
    assert best_eval_return(str(tmp_path / "nowhere")) != best_eval_return(str(tmp_path / "nowhere"))  # NaN
