"""``shoal compare`` reads run files it did not write: a malformed one is one line naming the
file and the field, a value that is not a finite return is refused, a run without evaluations is
left out with a warning, and ``--bootstrap-samples`` is bounded (issue 36, item 10)."""

import csv
import json

import pytest

from shoal.launch.experiments.cli import aggregates
from tests.faults.harness import shoal_main

CONFIG = {
    "agent": "dqn",
    "env_id": "CartPole-v1",
    "seed": 0,
    "resolved_target_return": 475.0,
    "agent_config": {"learning_rate": 0.001},
}
ROWS = [["env_steps", "wall_s", "eval_return"], [1000, 1.0, 10.0], [2000, 2.0, 50.0]]


def _run(root, name, config=CONFIG, rows=ROWS):
    """A run directory as ``shoal compare`` reads it: ``config`` (JSON, or the text itself) and
    ``rows`` as ``eval.csv`` (``None``: no such file)."""
    path = root / name
    path.mkdir()
    (path / "config.json").write_text(config if isinstance(config, str) else json.dumps(config))
    if rows is not None:
        with open(path / "eval.csv", "w", newline="") as f:
            csv.writer(f).writerows(rows)
    return path


def _compare(*runs, samples="50"):
    out = runs[0].parent / "out"
    rc, errors, text = shoal_main("compare", *map(str, runs), "--out", str(out), "--bootstrap-samples", samples)
    return rc, errors, text, out


CONFIGS = [
    ([1, 2], "config.json: the config must be an object, got [1, 2]"),
    ({**CONFIG, "env_id": 5}, "config.json: env_id must be a string, got 5"),
    ({k: v for k, v in CONFIG.items() if k != "env_id"}, "config.json: env_id must be a string, got null"),
    ({**CONFIG, "seed": None}, "config.json: seed must be an integer, got null"),
    (
        {**CONFIG, "resolved_target_return": "475"},
        'config.json: resolved_target_return must be a finite number or null, got "475"',
    ),
    (
        {**CONFIG, "resolved_target_return": 1e308},
        "config.json: resolved_target_return must be within ±3.4e+38 or null, got 1e+308",
    ),
    ({**CONFIG, "agent_config": [1]}, "config.json: agent_config must be an object, got [1]"),
    (
        "{not json",
        "config.json (the run's config) is damaged: Expecting property name enclosed in double quotes at line 1",
    ),
]


@pytest.mark.parametrize("config, says", CONFIGS, ids=range(len(CONFIGS)))
def test_a_malformed_config_is_one_line_naming_the_file_and_the_field(tmp_path, config, says):
    good, bad = _run(tmp_path, "good"), _run(tmp_path, "bad", config=config)
    rc, errors, text, out = _compare(good, bad)
    assert rc == 2 and len(errors) == 1 and errors[0].startswith(f"shoal: error: {bad}/{says}"), text
    assert "Traceback" not in text and not out.exists()


BIG = "x" * (200 * 1024)
EVALS = [
    ([["env_steps", "eval_return"], [1000, 10.0]], ": no wall_s column (it has env_steps, eval_return)"),
    (ROWS + [[3000, 3.0, "inf"]], ' line 4: eval_return must be a finite number within ±3.4e+38, got "inf"'),
    (ROWS + [[3000, 3.0, "-inf"]], ' line 4: eval_return must be a finite number within ±3.4e+38, got "-inf"'),
    (ROWS + [[3000, 3.0, "1e308"]], ' line 4: eval_return must be a finite number within ±3.4e+38, got "1e308"'),
    (ROWS + [[3000, 3.0, "-1e308"]], ' line 4: eval_return must be a finite number within ±3.4e+38, got "-1e308"'),
    (ROWS + [["3k", 3.0, 9.0]], ' line 4: env_steps must be a finite number within ±3.4e+38, got "3k"'),
    (ROWS + [[3000, "nan", 9.0]], ' line 4: wall_s must be a finite number within ±3.4e+38, got "nan"'),
    (ROWS + [[-3000, 3.0, 9.0]], ' line 4: env_steps must be a number >= 0, got "-3000"'),
    (ROWS + [[3000, 3.0]], " line 4: eval_return is missing (the row is short)"),
    (ROWS + [[3000, 3.0, BIG]], " line 4: field larger than field limit (131072)"),
]


@pytest.mark.parametrize("rows, says", EVALS, ids=range(len(EVALS)))
def test_a_malformed_or_non_finite_evaluation_is_one_line_naming_the_file_line_and_field(tmp_path, rows, says):
    good, bad = _run(tmp_path, "good"), _run(tmp_path, "bad", rows=rows)
    rc, errors, text, out = _compare(good, bad)
    assert rc == 2 and errors == [f"shoal: error: {bad}/eval.csv{says}"], text[-3000:]
    assert "Traceback" not in text and not out.exists()


def test_a_run_without_evaluations_is_left_out_with_a_warning(tmp_path):
    good = _run(tmp_path, "good")
    empty, missing = _run(tmp_path, "empty", rows=ROWS[:1]), _run(tmp_path, "missing", rows=None)
    rc, errors, text, out = _compare(good, empty, missing)
    assert rc == 0 and not errors, text
    warnings = [line for line in text.splitlines() if line.startswith("shoal: warning:")]
    assert warnings == [
        f"shoal: warning: no evaluation recorded in {run} (eval.csv is missing or empty); it is left out"
        for run in (empty, missing)
    ] + [
        "shoal: warning: dqn on CartPole-v1 has 1 run: a 95% interval from so few seeds means little (3 or more "
        "are worth comparing)"
    ], text
    assert json.loads((out / "summary.json").read_text())["groups"]["dqn"]["tasks"]["CartPole-v1"]["runs"] == 1
    rc, errors, text, _ = _compare(empty, missing)
    assert rc == 2 and errors == [
        f"shoal: error: no evaluation recorded in {empty}, {missing} (eval.csv is missing or empty): nothing to compare"
    ], text


@pytest.mark.parametrize("samples", ["200000000", "100001", "0", "-5"])
def test_bootstrap_samples_are_bounded(tmp_path, samples):
    rc, errors, text, out = _compare(_run(tmp_path, "good"), samples=samples)
    assert rc == 2 and errors == [f"shoal: error: --bootstrap-samples must be in [1, 100,000], got {samples}"], text
    assert not out.exists()


def test_the_aggregates_refuse_what_they_cannot_bound():
    with pytest.raises(ValueError, match=r"^every score must be finite"):
        aggregates.bootstrap_ci({"a": [1.0, float("inf")]}, aggregates.iqm, samples=10)
    with pytest.raises(ValueError, match=r"^bootstrap samples must be in \[1, 100,000\], got 200000000"):
        aggregates.bootstrap_ci({"a": [1.0, 2.0]}, aggregates.iqm, samples=200_000_000)
    with pytest.raises(ValueError, match=r"^confidence must be in \(0, 1\), got 1.5"):
        aggregates.bootstrap_ci({"a": [1.0, 2.0]}, aggregates.iqm, samples=10, confidence=1.5)
    with pytest.raises(ValueError, match=r"^normalizing needs finite low < high"):
        aggregates.normalized([1.0], float("-inf"), 1.0)
