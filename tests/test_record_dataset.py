"""``shoal train ... --record-dataset DIR``: every whole episode a training run's actor played, as
a Minari dataset that Minari reads and ``--dataset`` trains on.

The recorder is checked against a real vector env stepped by hand (every episode's observations,
actions and rewards as the env gave them, in the order they ended; a discarded recording leaves
nothing), then through the CLI as a user runs it (a short DQN run records, an offline agent
trains on what it wrote). The refusals are one line each, exit status 2, nothing written.

Everything here needs the ``offline`` extra (minari) and skips without it.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from shoal.core.interfaces import Adder
from shoal.core.types import Step
from shoal.envs import make_vector_env
from shoal.launch.experiments.cli.main import main
from shoal.launch.experiments.config import experiment_config

minari = pytest.importorskip("minari", reason="the offline extra")

from shoal.launch.experiments.formats import minari_recording  # noqa: E402
from shoal.launch.experiments.formats.minari_recording import DatasetRecorder  # noqa: E402


class Steps(Adder):
    """The adder under the recorder: keeps what it is given."""

    def __init__(self):
        self.steps: list[Step] = []

    def add(self, step: Step) -> None:
        self.steps.append(step)


def _config(out: str):
    return experiment_config("dqn", "CartPole-v1", seed=3, num_envs=4, progress=False, record_dataset=out)


def _played(env, vector_steps: int, seed: int):
    """``vector_steps`` Steps of ``env`` with random actions, each env's episodes as played
    (observations ``T + 1``, the final one where it ended), in the order they ended."""
    rng = np.random.default_rng(seed)
    observation, _ = env.reset(seed=seed)
    playing = [{"observations": [observation[i]], "actions": [], "rewards": []} for i in range(env.num_envs)]
    ended_episodes, steps = [], []
    for _ in range(vector_steps):
        action = rng.integers(0, 2, env.num_envs)
        next_observation, reward, terminated, truncated, info = env.step(action)
        ended = terminated | truncated
        final = next_observation.copy()
        for i in np.nonzero(ended)[0]:
            final[i] = info["final_obs"][i]
        steps.append(Step(observation, action, reward, terminated, truncated, final, {}))
        for i in range(env.num_envs):
            playing[i]["actions"].append(action[i])
            playing[i]["rewards"].append(reward[i])
            playing[i]["observations"].append(final[i])
            if ended[i]:
                ended_episodes.append(playing[i])
                playing[i] = {"observations": [next_observation[i]], "actions": [], "rewards": []}
        observation = next_observation
    return steps, ended_episodes


def test_the_recorder_writes_each_whole_episode_as_the_env_played_it_and_passes_every_step_on(tmp_path):
    out = str(tmp_path / "cartpole-played")
    env = make_vector_env("CartPole-v1", 4, seed=3)
    steps, expected = _played(env, 600, seed=3)
    below = Steps()
    recorder = DatasetRecorder(below, _config(out), env, 4)
    for step in steps:
        recorder.add(step)
    written = recorder.finish()
    env.close()
    assert below.steps == steps  # (the run's own adder got every step, unchanged)
    assert written["episodes"] == len(expected) > minari_recording.FLUSH_EPISODES  # (written in more than one flush)
    assert written["steps"] == sum(len(e["actions"]) for e in expected)
    dataset = minari.MinariDataset(os.path.join(out, "data"))
    assert dataset.total_episodes == len(expected) and dataset.spec.env_spec.id == "CartPole-v1"
    for episode, played in zip(dataset.iterate_episodes(), expected):
        np.testing.assert_array_equal(episode.observations, np.asarray(played["observations"]))
        np.testing.assert_array_equal(episode.actions, np.asarray(played["actions"]))
        np.testing.assert_array_equal(episode.rewards, np.asarray(played["rewards"]))
        assert episode.terminations[-1] or episode.truncations[-1]
    assert sorted(os.listdir(tmp_path)) == ["cartpole-played"]  # (no staging directory left)


def test_a_dataset_directory_that_appears_during_the_run_is_never_replaced_and_the_recording_is_kept(tmp_path):
    out = tmp_path / "late"
    env = make_vector_env("CartPole-v1", 2, seed=0)
    steps, _ = _played(env, 50, seed=0)
    recorder = DatasetRecorder(Steps(), _config(str(out)), env, 2)
    for step in steps:
        recorder.add(step)
    out.mkdir()
    (out / "theirs").write_text("kept")
    with pytest.raises(ValueError, match="appeared while the run ran; the recording is kept in"):
        recorder.finish()
    recorder.discard()  # (the stack's cleanup after the error: the recording stays)
    env.close()
    assert (out / "theirs").read_text() == "kept"
    kept = [name for name in os.listdir(tmp_path) if name != "late"]
    assert len(kept) == 1 and os.path.isdir(tmp_path / kept[0] / "data")


def test_a_discarded_recording_leaves_nothing(tmp_path):
    env = make_vector_env("CartPole-v1", 2, seed=0)
    steps, _ = _played(env, 50, seed=0)
    recorder = DatasetRecorder(Steps(), _config(str(tmp_path / "never")), env, 2)
    for step in steps:
        recorder.add(step)
    recorder.discard()
    env.close()
    assert os.listdir(tmp_path) == []


def _error(capsys, *argv: str) -> str:
    assert main(["train", *argv, "--quiet"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("shoal: error: "), lines
    return lines[0]


def test_what_cannot_be_recorded_is_one_line_and_nothing_is_written(tmp_path, capsys):
    run = str(tmp_path / "run")
    (tmp_path / "taken").mkdir()
    cases = [
        (["--agent", "dqn", "--env", "CartPole-v1", "--record-dataset", str(tmp_path / "taken")], "exists"),
        (["--agent", "dqn", "--env", "CartPole-v1", "--record-dataset", str(tmp_path / "no" / "d")], "does not exist"),
        (["--agent", "dqn", "--env", "CartPole-v1", "--record-dataset", os.path.join(run, "d")], "does not exist"),
        (
            ["--agent", "dqn", "--env", "CartPole-v1", "--launcher", "processes", "--record-dataset", "d"],
            "records a one-process run's actor: drop --launcher processes",
        ),
        (
            ["--agent", "bc", "--env", "CartPole-v1", "--dataset", str(tmp_path / "taken"), "--record-dataset", "d"],
            "bc trains offline on --dataset, with no actor",
        ),
        (
            ["--agent", "ppo", "--env", "pettingzoo:mpe2.simple_spread_v3", "--env-arg", "N=2"]
            + ["--record-dataset", str(tmp_path / "d")],
            "records single-agent envs' episodes; pettingzoo:mpe2.simple_spread_v3 has many agents",
        ),
    ]
    for argv, expected in cases:
        assert expected in _error(capsys, *argv, "--run-dir", run), argv
        assert sorted(os.listdir(tmp_path)) == ["taken"], argv


@pytest.mark.e2e  # (a short DQN run, then bc on what it recorded)
def test_a_training_run_records_what_its_actor_played_and_bc_trains_on_it(tmp_path, capsys):
    out = str(tmp_path / "cartpole-dqn-play")
    common = ["--env", "CartPole-v1", "--seed", "0", "--quiet"]
    assert main(["train", "--agent", "dqn", *common, "--max-env-steps", "3000", "--eval-every", "3000",
                 "--run-dir", str(tmp_path / "dqn"), "--record-dataset", out]) == 0  # fmt: skip
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    recorded = result["record_dataset"]
    dataset = minari.MinariDataset(os.path.join(out, "data"))
    assert recorded["episodes"] == dataset.total_episodes > 0 and recorded["steps"] == dataset.total_steps
    assert dataset.total_steps <= result["env_steps"]  # (whole episodes only)
    returns = [float(episode.rewards.sum()) for episode in dataset.iterate_episodes()]
    lengths = [len(episode.actions) for episode in dataset.iterate_episodes()]
    assert returns == lengths  # (CartPole: a reward of 1 a step)
    with open(tmp_path / "dqn" / "config.json") as f:
        assert json.load(f)["run"]["record_dataset"] == out

    assert main(["train", "--agent", "bc", *common, "--dataset", out, "--max-env-steps", "50",
                 "--eval-every", "50", "--run-dir", str(tmp_path / "bc")]) == 0  # fmt: skip
    trained = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert trained["dataset"]["steps"] == dataset.total_steps and trained["learner_steps"] == 50

    # a resume records only where asked again, into a new directory
    assert main(["train", "--resume", str(tmp_path / "dqn"), "--max-env-steps", "4000", "--quiet"]) == 0
    assert "record_dataset" not in json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_the_compiled_loop_refuses_to_record_in_one_line(tmp_path):
    pytest.importorskip("gymnax", reason="the gymnax extra")
    from shoal.launch.experiments.anakin import run_anakin

    config = experiment_config("ppo", "gymnax:CartPole-v1", progress=False, record_dataset=str(tmp_path / "d"))
    with pytest.raises(ValueError, match="--launcher anakin keeps its envs' steps on the device"):
        run_anakin(config)
    assert os.listdir(tmp_path) == []
