"""Callbacks (``ExperimentConfig(callbacks=[...])``): called at each evaluation and at the end,
in the process that evaluates; one may end the run; one that raises is one warning."""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest

from shoal.launch import run_distributed_experiment, run_experiment
from shoal.launch.experiments.callbacks import Callback
from shoal.launch.experiments.config import experiment_config


class StopAfter(Callback):
    """Ends the run at its ``n``-th evaluation; keeps what it was given (and, with ``path``,
    writes it there: a distributed run calls it in its evaluator's process)."""

    def __init__(self, n: int, path: str | None = None) -> None:
        self.n, self.path, self.seen, self.ended = n, path, [], None

    def on_evaluation(self, evaluation):
        self.seen.append(evaluation)
        if self.path:
            with open(self.path, "a") as f:
                f.write(
                    json.dumps(
                        {
                            "env_steps": evaluation.env_steps,
                            "mean_return": evaluation.mean_return,
                            "has_params": evaluation.params is not None,
                        }
                    )
                    + "\n"
                )
        return evaluation.num_evals >= self.n

    def on_end(self, result):
        self.ended = result


class Broken(Callback):
    def __init__(self) -> None:
        self.calls = 0

    def on_evaluation(self, evaluation):
        self.calls += 1
        raise KeyError("no such metric")


class Exits(Callback):
    """Leaves at its first evaluation as a script would, ``sys.exit(5)``, or is interrupted there
    (``KeyboardInterrupt``: a Ctrl-C while it runs)."""

    def __init__(self, how: str = "exit") -> None:
        self.how, self.ended = how, None

    def on_evaluation(self, evaluation):
        if self.how == "exit":
            sys.exit(5)
        raise KeyboardInterrupt

    def on_end(self, result):
        self.ended = result


class ExitsAtEnd(Callback):
    def on_end(self, result):
        sys.exit(3)


def config(tmp_path, callbacks, **settings):
    return experiment_config(
        "dqn",
        "CartPole-v1",
        seed=0,
        max_env_steps=20_000,
        eval_every=1_000,
        eval_episodes=2,
        target_return=10**6,
        run_dir=str(tmp_path / "run"),
        progress=False,
        callbacks=callbacks,
        **settings,
    )


@pytest.mark.e2e  # (a real training run)
def test_a_callback_sees_each_evaluation_can_end_the_run_and_one_that_raises_is_one_warning(tmp_path, capsys):
    stop, broken = StopAfter(2), Broken()
    result = run_experiment(config(tmp_path, [broken, stop]))
    assert result["stopped_by"] == "StopAfter" and result["solved"] is False
    assert result["num_evals"] == 2 and result["env_steps"] < 20_000
    first, second = stop.seen
    assert (first.num_evals, second.num_evals) == (1, 2) and first.env_steps < second.env_steps
    assert len(first.returns) == 2 and first.mean_return == pytest.approx(float(np.mean(first.returns)))
    assert first.params is not None and first.run_dir == str(tmp_path / "run")
    assert stop.ended["stopped_by"] == "StopAfter" and stop.ended["num_evals"] == 2
    assert broken.calls == 1  # (not called again)
    warnings = [line for line in capsys.readouterr().err.splitlines() if "callback" in line]
    assert warnings == [
        "shoal: warning: callback Broken.on_evaluation raised KeyError: 'no such metric'; it is not called again"
    ]
    with open(tmp_path / "run" / "config.json") as f:
        assert "callbacks" not in json.load(f)


@pytest.mark.e2e  # (the processes launcher: nodes started as processes)
def test_a_distributed_runs_callbacks_run_in_its_evaluator(tmp_path):
    seen = tmp_path / "seen.jsonl"
    result = run_distributed_experiment(config(tmp_path, [StopAfter(1, str(seen))]), num_actors=1, launcher="processes")
    assert result["stopped_by"] == "StopAfter" and result["num_evals"] == 1
    [line] = seen.read_text().splitlines()
    assert json.loads(line)["has_params"] is True


def test_a_callback_without_hooks_is_refused_before_the_run_starts(tmp_path):
    with pytest.raises(ValueError, match="has none of the hooks on_evaluation, on_end"):
        run_experiment(config(tmp_path, [object()]))
    assert not os.path.exists(tmp_path / "run")


@pytest.mark.e2e  # (a real training run)
def test_a_callback_that_exits_ends_the_run_as_one_that_returns_true_with_one_line(tmp_path, capsys):
    exits = Exits("exit")
    result = run_experiment(config(tmp_path, [exits]))
    assert result["stopped_by"] == "Exits" and result["num_evals"] == 1 and result["env_steps"] < 20_000
    assert exits.ended["stopped_by"] == "Exits"  # (its on_end is still called)
    saved = json.loads((tmp_path / "run" / "result.json").read_text())
    assert saved["stopped_by"] == "Exits" and saved["env_steps"] == result["env_steps"]
    run = json.loads((tmp_path / "run" / "checkpoints" / "run.json").read_text())
    assert run["env_steps"] == result["env_steps"]  # (the last checkpoint: the run's end)
    lines = [line for line in capsys.readouterr().err.splitlines() if "callback" in line]
    assert lines == [
        "shoal: warning: callback Exits.on_evaluation raised SystemExit(5): the run ends here, as if it returned True"
    ]


@pytest.mark.e2e  # (a real training run)
def test_a_ctrl_c_while_a_callback_runs_interrupts_the_run_as_anywhere_else(tmp_path, capsys):
    """A KeyboardInterrupt in a callback is the user's Ctrl-C (from Python, a notebook): it leaves
    ``run_experiment`` as one anywhere in the run does, with no result and no word of a callback."""
    exits = Exits("interrupt")
    with pytest.raises(KeyboardInterrupt):
        run_experiment(config(tmp_path, [exits]))
    assert exits.ended is None and not (tmp_path / "run" / "result.json").exists()
    assert not [line for line in capsys.readouterr().err.splitlines() if "callback" in line]


@pytest.mark.e2e  # (a real training run)
def test_a_callback_that_exits_in_on_end_leaves_the_result_standing(tmp_path, capsys):
    result = run_experiment(config(tmp_path, [StopAfter(1), ExitsAtEnd()]))
    assert result["stopped_by"] == "StopAfter"
    assert json.loads((tmp_path / "run" / "result.json").read_text())["stopped_by"] == "StopAfter"
    lines = [line for line in capsys.readouterr().err.splitlines() if "callback" in line]
    assert lines == [
        "shoal: warning: callback ExitsAtEnd.on_end raised SystemExit(3) as the run ended: ignored "
        "(the run's result stands)"
    ]


@pytest.mark.e2e  # (the processes launcher: nodes started as processes)
def test_a_distributed_runs_callback_that_exits_ends_the_run_from_its_evaluator(tmp_path):
    result = run_distributed_experiment(config(tmp_path, [Exits()]), num_actors=1, launcher="processes")
    assert result["stopped_by"] == "Exits" and result["num_evals"] == 1
    assert json.loads((tmp_path / "run" / "result.json").read_text())["stopped_by"] == "Exits"
