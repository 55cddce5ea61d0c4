"""``shoal compare`` and its aggregates, on small synthetic run directories with known answers."""

import csv
import json

import matplotlib.image
import numpy as np
import pytest

from shoal.launch.experiments.cli import aggregates
from shoal.launch.experiments.cli.compare import compare, load_run
from shoal.launch.experiments.cli.compare_plots import curve
from shoal.launch.experiments.cli.main import main


def test_the_interquartile_mean_cuts_a_quarter_from_each_end():
    assert aggregates.iqm([8, 1, 7, 2, 6, 3, 5, 4]) == 4.5  # mean of 3, 4, 5, 6
    assert aggregates.iqm([1, 2, 3]) == 2.0  # (floor(3 / 4) = 0 cut)
    assert aggregates.iqm([0, 10, 10, 10, 10, 1000]) == 10.0  # an outlier seed on either side is cut


def test_the_optimality_gap_counts_only_the_shortfall():
    assert aggregates.optimality_gap([0.5, 1.2, 0.9]) == pytest.approx((0.5 + 0.0 + 0.1) / 3)


def test_the_bootstrap_is_stratified_by_task():
    """Every resample keeps each task's runs: task a's scores are all 0 and b's all 1, so every
    resample's pooled mean is 0.5 (resampling the pool would not keep it)."""
    point, low, high = aggregates.bootstrap_ci({"a": [0, 0, 0], "b": [1, 1, 1]}, np.mean, samples=500)
    assert point == low == high == 0.5
    point, low, high = aggregates.bootstrap_ci({"a": [0.0, 1.0, 2.0, 3.0]}, aggregates.iqm, samples=500)
    assert point == 1.5 and 0.0 <= low < 1.5 < high <= 3.0
    assert aggregates.bootstrap_ci({"a": [0.0, 1.0, 2.0, 3.0]}, aggregates.iqm, samples=500)[1:] == (low, high)


def make_run(root, name, agent, env, seed, evals, target=475.0, **settings):
    """A run directory with ``config.json`` and ``eval.csv`` (rows: env steps, wall s, return)."""
    path = root / name
    path.mkdir()
    config = {
        "agent": agent,
        "env_id": env,
        "seed": seed,
        "preset": "classic",
        "num_envs": settings.pop("num_envs", 16),
        "resolved_target_return": target,
        "agent_config": {"learning_rate": 1e-3, **settings},
    }
    (path / "config.json").write_text(json.dumps(config))
    with open(path / "eval.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["env_steps", "wall_s", "eval_return"])
        writer.writerows(evals)
    return str(path)


@pytest.fixture
def runs(tmp_path):
    """dqn: 4 seeds with final returns 100, 200, 300, 500 (one reaches 475 at 3,000 steps);
    ppo: 4 seeds ending at 475, 480, 500, 10 (three reach the target, at 1,000, 2,000, 2,000)."""
    dqn = [
        make_run(
            tmp_path, f"dqn-{s}", "dqn", "CartPole-v1", s, [(1000, 1.0, 10.0), (2000, 2.0, 50.0), (3000, 3.0, final)]
        )
        for s, final in enumerate([100.0, 200.0, 300.0, 500.0])
    ]
    ppo = [
        make_run(tmp_path, "ppo-0", "ppo", "CartPole-v1", 0, [(1000, 0.5, 475.0)], num_envs=8),
        make_run(tmp_path, "ppo-1", "ppo", "CartPole-v1", 1, [(1000, 0.5, 20.0), (2000, 1.0, 480.0)], num_envs=8),
        make_run(tmp_path, "ppo-2", "ppo", "CartPole-v1", 2, [(1000, 0.5, 30.0), (2000, 1.5, 500.0)], num_envs=8),
        make_run(tmp_path, "ppo-3", "ppo", "CartPole-v1", 3, [(1000, 0.5, 30.0), (2000, 1.5, 10.0)], num_envs=8),
    ]
    return dqn, ppo


def test_compare_groups_seeds_and_gives_the_hand_computed_answers(runs, tmp_path):
    dqn, ppo = runs
    summary = compare(dqn + ppo, out=str(tmp_path / "out"), samples=300)
    d = summary["groups"]["dqn"]["tasks"]["CartPole-v1"]
    p = summary["groups"]["ppo"]["tasks"]["CartPole-v1"]
    assert d["runs"] == 4 and d["seeds"] == [0, 1, 2, 3]
    assert d["final_return_iqm"][0] == 250.0  # mean of 200, 300
    assert p["final_return_iqm"][0] == 477.5  # mean of 475, 480
    assert d["final_return_mean"] == 275.0
    assert (d["reached_target"], d["env_steps_to_target"], d["wall_s_to_target"]) == (1, 3000.0, 3.0)
    assert (p["reached_target"], p["env_steps_to_target"]) == (3, 2000.0)  # median of 1,000, 2,000, 2,000
    # normalized from the task's lowest eval return (10) to the target (475)
    gap = np.mean([max(1 - (f - 10) / 465, 0) for f in (100, 200, 300, 500)])
    assert d["optimality_gap"][0] == pytest.approx(gap)
    table = (tmp_path / "out" / "table.md").read_text()
    assert "| dqn | CartPole-v1 | 4 | 250 [" in table and "| ppo | all tasks (1, normalized) | 4 |" in table
    image = matplotlib.image.imread(tmp_path / "out" / "CartPole-v1.png")
    assert image.shape[0] > 100 and image.shape[1] > 100
    assert (tmp_path / "out" / "CartPole-v1.svg").read_text().lstrip().startswith("<?xml")
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["by"] == "agent"


def test_the_curve_keeps_a_finished_runs_last_return():
    a = {"evals": np.array([[1000, 1.0, 10.0], [2000, 2.0, 500.0]])}
    b = {"evals": np.array([[1000, 1.0, 30.0], [2000, 2.0, 50.0], [3000, 3.0, 90.0]])}
    x, mean, low, high = curve([a, b], 0)
    assert x.tolist() == [1000, 2000, 3000]
    assert mean.tolist() == [20.0, 275.0, 295.0] and low.tolist() == [10.0, 50.0, 90.0]
    assert high.tolist() == [30.0, 500.0, 500.0]


def test_compare_by_a_setting(runs, tmp_path):
    dqn, ppo = runs
    assert set(compare(dqn + ppo, by="num_envs", samples=10)["groups"]) == {"num_envs=16", "num_envs=8"}
    assert set(compare(dqn, by="learning_rate", samples=10)["groups"]) == {"learning_rate=0.001"}
    assert set(compare(dqn, by="agent_config.learning_rate", samples=10)["groups"]) == {"learning_rate=0.001"}


def test_the_command_prints_the_table_and_refuses_bad_input_in_one_line(runs, tmp_path, capsys):
    dqn, ppo = runs
    assert main(["compare", *dqn, *ppo, "--out", str(tmp_path / "cmp"), "--bootstrap-samples", "50"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("| agent | task | runs | final return IQM [95% CI]") and "| ppo | CartPole-v1 | 4 |" in out
    assert main(["compare", str(tmp_path)]) == 2
    assert f"shoal: error: {tmp_path} is not a run directory (it has no config.json)" in capsys.readouterr().err
    assert main(["compare", *dqn, "--by", "colour"]) == 2
    err = capsys.readouterr().err
    assert "--by 'colour': no such setting" in err and "learning_rate" in err and err.count("\n") == 1
    (tmp_path / "dqn-0" / "eval.csv").write_text("env_steps,wall_s,eval_return\n")
    assert main(["compare", dqn[0]]) == 2
    assert "no evaluation recorded in" in capsys.readouterr().err
    assert load_run(dqn[1])["target"] == 475.0


def test_each_run_is_judged_against_its_own_target_and_few_seeds_get_a_caution(tmp_path, capsys):
    high = make_run(tmp_path, "dqn-0", "dqn", "CartPole-v1", 0, [(1000, 1.0, 480.0)], target=10_000.0)
    usual = [
        make_run(tmp_path, f"dqn-{s}", "dqn", "CartPole-v1", s, [(1000, 1.0, 20.0), (2000, 2.0, 480.0)])
        for s in (1, 2, 3)
    ]
    d = compare([high, *usual], samples=100)["groups"]["dqn"]["tasks"]["CartPole-v1"]
    assert (d["reached_target"], d["runs_with_target"], d["target"]) == (3, 4, [475.0, 10_000.0])
    assert d["optimality_gap"][0] == 0.0  # (scaled to the common target, 475: every final return is above it)
    assert "has 4 runs" not in capsys.readouterr().err
    compare(usual[:2], samples=100)
    assert (
        "shoal: warning: dqn on CartPole-v1 has 2 runs: a 95% interval from so few seeds means little"
        in capsys.readouterr().err
    )
