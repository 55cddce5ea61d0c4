"""benchmarks/published_tables.py: published.md's generated tables from recorded runs (no training)."""

import importlib.util
import json
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def tables():
    spec = importlib.util.spec_from_file_location(
        "published_tables", os.path.join(ROOT, "benchmarks", "published_tables.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def record(game, seed, greedy, training, label="ppo/gymnax-minatar"):
    return {
        "label": label,
        "game": game,
        "seed": seed,
        "env_steps": 1_286_144,
        "final_eval_return": greedy,
        "training_return": training,
    }


def write_results(tmp_path, records):
    (tmp_path / "minatar").mkdir()
    (tmp_path / "minatar" / "presets.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def test_rewrites_only_between_the_markers_and_checks(tables, tmp_path):
    records = [record("Breakout", s, 10.0 + s, 12.0 + s) for s in range(5)]
    records += [record("Breakout", s, 20.0, 17.0, "ppo/gymnax-minatar entropy_coef=0.02") for s in range(5)]
    records += [record("Seaquest", 0, 3.0, 2.5)]
    write_results(tmp_path, records)
    doc = tmp_path / "published.md"
    doc.write_text("before\n<!-- generated:minatar-ppo start -->\nstale\n<!-- generated:minatar-ppo end -->\nafter\n")
    args = ["--doc", str(doc), "--results", str(tmp_path)]
    assert tables.main([*args, "--check"]) == 1  # (out of date: nothing written)
    assert "stale" in doc.read_text()
    assert tables.main(args) == 0
    text = doc.read_text()
    assert text.startswith("before\n<!-- generated:minatar-ppo start -->\n\n|") and text.endswith(
        "\n<!-- generated:minatar-ppo end -->\nafter\n"
    )
    rows = [line for line in text.splitlines() if line.startswith("| Breakout") or line.startswith("| Seaquest")]
    assert len(rows) == 3
    assert (
        "| 0-4 | 12.00 [10.00-14.00] | 14.00 [12.00-16.00] | 12.0, 13.0, 14.0, 15.0, 16.0 | 15.7 |" in rows[0]
        and "below (-11%)" in rows[0]
    )
    assert "`ppo/gymnax-minatar entropy_coef=0.02`" in rows[1] and "at or above (+8%)" in rows[1]
    assert rows[2].startswith("| Seaquest | `ppo/gymnax-minatar` | 1.29M | 0 | 3.00 | 2.50 | 2.5 | — |")
    assert tables.main([*args, "--check"]) == 0  # (the same records: the same table)


def test_missing_markers_is_one_line_exit_2(tables, tmp_path, capsys):
    doc = tmp_path / "published.md"
    doc.write_text("<!-- generated:minatar-ppo start -->\nno end marker\n")
    assert tables.main(["--doc", str(doc), "--results", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "generated:minatar-ppo end" in err
    assert doc.read_text() == "<!-- generated:minatar-ppo start -->\nno end marker\n"


def test_committed_page_matches_the_committed_records(tables):
    assert tables.main(["--check"]) == 0, "run: python benchmarks/published_tables.py"


def test_dqn_rows_stand_beside_the_minatar_papers_dqn(tables):
    records = [record("Freeway", s, 30.0, 40.0 + s, "dqn/minatar") for s in range(3)]
    table = tables.minatar_dqn_table(records)
    assert "final eval (ε = 0.01, 10 episodes)" in table and "the MinAtar paper's DQN at 1M" in table
    row = next(line for line in table.splitlines() if line.startswith("| Freeway"))
    assert (
        "| 0-2 | 30.00 [30.00-30.00] | 41.00 [40.00-42.00] | 40.0, 41.0, 42.0 | 47.8 |" in row and "below (-14%)" in row
    )


def test_against_reads_negative_returns_as_higher_is_better(tables):
    assert tables.against(-131.8, -133.0) == "at or above (+1%)"  # (closer to 0: better)
    assert tables.against(-175.1, -133.0) == "below (-32%)"
    assert tables.against(9173.0, 9059.3) == "at or above (+1%)"


def test_mappo_and_sac_tables_from_their_records(tables):
    spread = [
        {"label": "auto", "seed": s, "team_return": t, "mappo_scale": 2 * t - 75, "wall_s": 100.0}
        for s, t in enumerate([-29.0, -28.0, -30.0])
    ]
    row = tables.mappo_spread_table(spread).splitlines()[2]
    assert row.startswith(
        "| `ppo/jaxmarl-mpe` (the tuned preset) | 0-2 | -29.00 [-30.00, -28.00] | -133.0 [-135.0, -131.0]"
    )
    assert row.endswith("| at or above (+0%); 2 of 3 seeds at or above |")
    sac = [
        {
            "agent": "sac hidden_sizes=256,256",
            "env": "Hopper-v5",
            "seed": s,
            "env_steps": 300_000,
            "final_eval_return": v,
        }
        for s, v in enumerate([3000.0, 3500.0])
    ]
    sac.append({"agent": "sac", "env": "Ant-v5", "seed": 0, "env_steps": 1_000_000, "final_eval_return": 5000.0})
    sac.append(dict(sac[0]))  # (a record copied twice: one seed)
    sac.append({**sac[0], "agent": "ppo"})  # (a sweep's other agent: not SAC's row)
    rows = tables.mujoco_sac_table(sac).splitlines()[2:]
    assert len(rows) == 2
    assert rows[0].startswith(
        "| Hopper-v5 | `sac hidden_sizes=256,256` | 300k | 0-1 | 3250 [3000-3500] | 3000, 3500 | 3,387.7 ± 114.6 |"
    )
    assert rows[0].endswith("| below (-4%) |")
    assert rows[1] == "| Ant-v5 | `sac` | 1M | 0 | 5000 | 5000 | — | none recorded here | — |"
