"""Logs that lose nothing: CSVs append across processes and widen their header; a logger that
fails to close does not keep the rest of a run from being cleaned up."""

import csv

import pytest

from shoal.agents.dqn import DQNBuilder, DQNConfig
from shoal.core import loggers
from shoal.launch import ExperimentConfig, run_experiment


def rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_csv_appends_across_processes_and_widens_its_header(tmp_path):
    first = loggers.CSVLogger(str(tmp_path), "actor_0")
    first.write({"env_steps": 8, "steps_per_s": 1.5})
    first.close()
    restarted = loggers.CSVLogger(str(tmp_path), "actor_0")  # e.g. the node after a restart
    restarted.write({"env_steps": 16, "steps_per_s": 2.5, "episode_return": 21.0})  # a new column
    restarted.write({"env_steps": 24, "steps_per_s": 3.5})
    restarted.close()
    assert rows(tmp_path / "actor_0.csv") == [
        {"env_steps": "8", "steps_per_s": "1.5", "episode_return": ""},
        {"env_steps": "16", "steps_per_s": "2.5", "episode_return": "21.0"},
        {"env_steps": "24", "steps_per_s": "3.5", "episode_return": ""},
    ]


@pytest.mark.e2e
def test_a_logger_failing_to_close_does_not_skip_stopping_the_replay_server(tmp_path, monkeypatch, capsys):
    from shoal.replay import default_backend

    if default_backend() == "reverb":
        from shoal.replay.reverb import ReverbServer as Server
    else:
        from shoal.replay.native import NativeReplayServer as Server
    stopped = []
    stop = Server.stop

    def recorded_stop(self):
        stopped.append(self)
        stop(self)

    def failing_close(self):
        raise RuntimeError("the log's device went away")

    monkeypatch.setattr(Server, "stop", recorded_stop)
    monkeypatch.setattr(loggers.CSVLogger, "close", failing_close)
    config = ExperimentConfig.from_flat(
        builder=DQNBuilder(DQNConfig(min_replay_size=64)),
        env_id="CartPole-v1",
        seed=0,
        num_envs=4,
        max_env_steps=256,
        eval_every=256,
        eval_episodes=1,
        target_return=1e9,
        run_dir=str(tmp_path / "run"),
        progress=False,
    )
    result = run_experiment(config)
    assert result["env_steps"] >= 256 and len(stopped) == 1
    assert "shoal: warning: could not close the train log: RuntimeError" in capsys.readouterr().err


def test_the_progress_line_shows_what_is_not_measured_yet_as_a_dash():
    import io

    from shoal.core.loggers import TerminalLogger

    stream = io.StringIO()
    TerminalLogger("train", stream=stream).write({"env_steps": 2_000, "eval_return": float("nan"), "loss": 0.5})
    assert stream.getvalue().strip() == "[train] env_steps 2,000 | eval_return - | loss 0.5"


def test_a_resume_says_an_overdue_evaluation_runs_at_once():
    from shoal.launch.experiments.evaluation import next_evaluation

    assert next_evaluation(28_000, 28_176) == "next evaluation at once (it was due at 28,000 env steps)"
    assert next_evaluation(30_000, 28_176) == "next evaluation at 30,000 env steps"
