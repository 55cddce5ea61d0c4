"""``shoal train --dataset PATH`` and the offline agents ``bc`` and ``cql``.

Datasets both ways: one written by Minari itself (its ``DataCollector``, a heuristic CartPole
policy with 20% random actions) trains Shoal's offline agents, and one that ``shoal record``
writes of a tiny trained DQN does too (and seeds an online DQN's replay). Each offline run goes
through the CLI as a user's does: train, resume from its checkpoint, export, evaluate. The
refusals -- a dataset whose spaces differ from the env's, a truncated or corrupted file, an
empty dataset, ``--dataset`` with an on-policy agent or a launcher, an offline agent without a
dataset -- are one line each, exit status 2, and leave no run directory.

Everything here needs the ``offline`` extra (minari) and skips without it.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from shoal.launch.experiments.cli.main import main
from tests.minari_datasets import collect

minari = pytest.importorskip("minari", reason="the offline extra")

CARTPOLE_ID = "cartpole-heuristic-v0"


def _balance(observation, rng, space):
    """Pushes the cart towards the pole's lean (returns ~200-500), a random action 20% of the time."""
    return int(rng.integers(2)) if rng.random() < 0.2 else int(observation[2] + 0.5 * observation[3] > 0)


@pytest.fixture(scope="module")
def cartpole_dataset(tmp_path_factory) -> str:
    """20 CartPole episodes written by minari's DataCollector (~5k steps, ~2 s)."""
    return collect(str(tmp_path_factory.mktemp("minari")), "CartPole-v1", CARTPOLE_ID, 20, _balance)


def _train(capsys, *argv: str) -> dict:
    assert main(["train", *argv, "--quiet"]) == 0, capsys.readouterr().err[-3000:]
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def _one_error_line(capsys) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("shoal: error: "), lines
    return lines[0]


# --- what is refused: one line, exit 2, nothing written


def test_a_dataset_an_agent_or_an_env_cannot_use_is_one_line_and_nothing_is_written(tmp_path, capsys, cartpole_dataset):
    run = str(tmp_path / "run")
    cases = [
        (  # the spaces differ: both named
            ["--agent", "cql", "--env", "Acrobot-v1", "--dataset", cartpole_dataset],
            "differs from the env's Box(",
        ),
        (
            ["--agent", "ppo", "--env", "CartPole-v1", "--dataset", cartpole_dataset],
            "(on-policy: ppo, impala; r2d2: with its recurrent state)",
        ),
        (["--agent", "impala", "--env", "CartPole-v1", "--dataset", cartpole_dataset], "'impala' learns from its own"),
        (["--agent", "r2d2", "--env", "CartPole-v1", "--dataset", cartpole_dataset], "'r2d2' learns from its own"),
        (["--agent", "bc", "--env", "CartPole-v1"], "trains offline, from a dataset: give --dataset PATH"),
        (["--agent", "cql", "--env", "CartPole-v1", "--dataset", str(tmp_path / "none")], "not a dataset directory"),
        (["--agent", "cql", "--env", "CartPole-v1", "--dataset", str(tmp_path)], "no Minari dataset there"),
        (
            ["--agent", "dqn", "--env", "CartPole-v1", "--dataset", cartpole_dataset, "--launcher", "processes"],
            "--dataset runs in one process",
        ),
        (
            ["--agent", "cql", "--env", "CartPole-v1", "--dataset", cartpole_dataset, "--set", "max_replay_size=100"],
            "more than max_replay_size=100",
        ),
    ]
    for argv, message in cases:
        assert main(["train", *argv, "--run-dir", run, "--quiet"]) == 2, argv
        line = _one_error_line(capsys)
        assert message in line, (argv, line)
    assert not os.path.exists(run)


def _copy(source: str, to: str) -> str:
    import shutil

    shutil.copytree(source, to)
    return to


def test_a_truncated_corrupted_or_empty_dataset_is_one_line_and_nothing_is_written(tmp_path, capsys, cartpole_dataset):
    import gymnasium as gym
    from minari.dataset.minari_storage import MinariStorage

    truncated = _copy(cartpole_dataset, str(tmp_path / "truncated"))
    data = os.path.join(truncated, "data", "main_data.hdf5")
    with open(data, "r+b") as f:
        f.truncate(os.path.getsize(data) // 2)
    corrupted = _copy(cartpole_dataset, str(tmp_path / "corrupted"))
    data = os.path.join(corrupted, "data", "main_data.hdf5")
    with open(data, "r+b") as f:
        f.seek(0)
        f.write(b"\0" * 4096)
    broken_metadata = _copy(cartpole_dataset, str(tmp_path / "metadata"))
    with open(os.path.join(broken_metadata, "data", "metadata.json"), "w") as f:
        f.write('{"dataset_id": ')
    empty = str(tmp_path / "empty")
    os.makedirs(os.path.join(empty, "data"))
    env = gym.make("CartPole-v1")
    MinariStorage.new(
        os.path.join(empty, "data"),
        observation_space=env.observation_space,
        action_space=env.action_space,
        data_format="hdf5",
    ).update_metadata({"dataset_id": "empty-v0", "minari_version": minari.__version__})
    run = str(tmp_path / "run")
    for path, message in [
        (truncated, "cannot read"),
        (corrupted, "cannot read"),
        (broken_metadata, "cannot read it as a Minari dataset"),
        (empty, "holds no episodes"),
    ]:
        assert main(["train", "--agent", "bc", "--env", "CartPole-v1", "--dataset", path, "--run-dir", run]) == 2
        line = _one_error_line(capsys)
        assert f"--dataset {path!r}: " in line and message in line, line
    assert not os.path.exists(run)


def test_the_dataset_fills_replay_in_lanes_of_the_agents_items():
    """``fill_replay`` cuts the episodes into ``num_envs`` lanes; an n-step adder's windows never
    join two episodes (its items: ``num_envs * (length - n + 1)`` transitions)."""
    from shoal.agents import get_builder
    from shoal.launch.experiments.formats.minari_reading import Episodes
    from shoal.launch.experiments.offline import fill_replay

    class Adder:
        def __init__(self):
            self.steps = []

        def add(self, step):
            self.steps.append(step)

        def flush(self):
            pass

        def close(self):
            pass

    class Builder:
        config = get_builder("cql", n_step=3).config

        def make_adder(self, client, spec):
            self.adder = Adder()
            return self.adder

    class Spec:
        num_envs = 4

    steps = 4 * 25 + 3  # (3 left out: not a whole vector step)
    ends = np.zeros(steps, bool)
    ends[[9, 40, 70, steps - 1]] = True
    episodes = Episodes(
        observation=np.arange(steps, dtype=np.float32)[:, None],
        action=np.zeros(steps, np.int64),
        reward=np.ones(steps, np.float32),
        terminated=ends,
        truncated=np.zeros(steps, bool),
        next_observation=np.arange(1, steps + 1, dtype=np.float32)[:, None],
        num_episodes=4,
        returns=np.array([10.0, 31.0, 30.0, 32.0]),
    )
    builder = Builder()
    counts = fill_replay(builder, None, Spec(), episodes)
    assert counts["transitions"] == 4 * (25 - 2) and counts["steps"] == steps and counts["episodes"] == 4
    lanes = np.array([step.observation[:, 0] for step in builder.adder.steps])  # [25, 4]
    assert (lanes == np.arange(25)[:, None] + 25 * np.arange(4)).all()  # contiguous lanes, in order
    assert counts["return"]["quantiles"][0] == 10.0 and counts["return"]["quantiles"][-1] == 32.0


# --- training end to end (e2e: each trains for a few seconds)


@pytest.mark.e2e
@pytest.mark.parametrize("agent", ["bc", "cql"])
def test_an_offline_agent_trains_on_a_dataset_minari_wrote_resumes_exports_and_evaluates(
    tmp_path, capsys, cartpole_dataset, agent
):
    run = str(tmp_path / "run")
    flags = ["--max-env-steps", "400", "--eval-every", "200", "--eval-episodes", "4", "--target-return", "10000"]
    result = _train(
        capsys, "--agent", agent, "--env", "CartPole-v1", "--dataset", cartpole_dataset, "--run-dir", run, *flags
    )
    assert result["agent"] == agent and result["offline"] is True and result["env_steps"] == 0
    assert result["learner_steps"] == 400 and result["num_evals"] == 2
    dataset = minari.MinariDataset(os.path.join(cartpole_dataset, "data"))
    assert result["dataset"]["episodes"] == dataset.total_episodes and result["dataset"]["steps"] == dataset.total_steps
    n_step = 1 if agent == "bc" else 3  # (bc: single transitions; cql: DQN's 3-step windows)
    assert result["dataset"]["transitions"] == 16 * (dataset.total_steps // 16 - (n_step - 1))
    assert result["final_eval_return"] > 100  # (the data's policy balances the pole: cloned in 400 steps)
    with open(os.path.join(run, "config.json")) as f:
        assert json.load(f)["run"]["dataset"] == cartpole_dataset
    # resumed from its checkpoint: replay (the dataset's items) and the learner come back, no dataset is read
    resumed = _train(capsys, "--resume", run, "--max-env-steps", "600")
    assert resumed["learner_steps"] == 600 and resumed["num_evals"] == 3 and "dataset" not in resumed
    # exported and evaluated as every agent's run
    out = str(tmp_path / "policy.jax")
    assert main(["export", run, "--out", out]) == 0, capsys.readouterr().err[-2000:]
    exported = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert exported["agent"] == agent and exported["checkpoint"] == 600 and os.path.getsize(out) > 0
    from shoal import load_policy

    policy = load_policy(run)
    observations = next(dataset.iterate_episodes([0])).observations[:-1]
    from jax import export

    with open(out, "rb") as f:
        artifact = export.deserialize(bytearray(f.read()))
    assert (np.asarray(artifact.call(observations.astype(np.float32))) == policy(observations)).all()


@pytest.mark.e2e
def test_a_dataset_shoal_record_wrote_trains_cql_and_seeds_dqns_replay(tmp_path, capsys):
    from shoal.launch import run_experiment
    from shoal.launch.experiments.config import experiment_config

    trained = str(tmp_path / "dqn")
    run_experiment(
        experiment_config(
            "dqn",
            "CartPole-v1",
            agent_settings={"min_replay_size": 200},
            max_env_steps=1500,
            eval_every=10**6,
            eval_episodes=1,
            run_dir=trained,
            target_return=10**6,
            progress=False,
        )
    )
    out = str(tmp_path / "recorded-v0")
    assert main(["record", trained, "--episodes", "8", "--epsilon", "0.2", "--out", out]) == 0
    recorded = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    flags = ["--eval-episodes", "2", "--target-return", "10000", "--env", "CartPole-v1", "--dataset", out]
    cql = _train(capsys, "--agent", "cql", "--run-dir", str(tmp_path / "cql"), "--max-env-steps", "100", *flags)
    assert cql["dataset"]["steps"] == recorded["steps"] and cql["learner_steps"] == 100
    # offline-to-online: dqn's replay seeded with the dataset, then its actor steps as ever
    dqn = _train(
        capsys,
        "--agent",
        "dqn",
        "--run-dir",
        str(tmp_path / "seeded"),
        "--max-env-steps",
        "300",
        "--eval-every",
        "300",
        "--set",
        "min_replay_size=200",
        *flags,
    )
    assert dqn["dataset"]["steps"] == recorded["steps"] and dqn["env_steps"] >= 300
    assert dqn["dataset"]["transitions"] == 16 * (recorded["steps"] // 16 - 2)  # (dqn's 3-step windows)
    # the seed counts as inserts: the learner trains on it from the first vector step on
    assert dqn["learner_steps"] > 0


@pytest.mark.e2e
def test_bc_clones_a_continuous_policy_by_mean_squared_error_and_the_data_seeds_sac(tmp_path, capsys):
    """Pendulum's actions from minari's DataCollector, a proportional controller of the pole's
    angle: BC's squashed mean regresses them; SAC starts from them in replay."""

    def controller(observation, rng, space):
        return np.clip(-2.0 * observation[1:2] - 0.5 * observation[2:3], -2.0, 2.0).astype(np.float32)

    dataset = collect(str(tmp_path / "minari"), "Pendulum-v1", "pendulum-controller-v0", 5, controller)
    run = str(tmp_path / "run")
    flags = ["--max-env-steps", "300", "--eval-every", "300", "--eval-episodes", "2", "--target-return", "0"]
    result = _train(capsys, "--agent", "bc", "--env", "Pendulum-v1", "--dataset", dataset, "--run-dir", run, *flags)
    assert result["dataset"]["steps"] == 1000 and result["learner_steps"] == 300
    from shoal import load_policy

    episode = next(minari.MinariDataset(os.path.join(dataset, "data")).iterate_episodes([0]))
    cloned = np.asarray(load_policy(run)(episode.observations[:-1].astype(np.float32)))
    assert cloned.shape == episode.actions.shape and np.abs(cloned - episode.actions).mean() < 0.3
    # offline-to-online for a continuous agent: sac's replay seeded with the same episodes
    seeded = _train(
        capsys,
        *("--agent", "sac", "--env", "Pendulum-v1", "--dataset", dataset, "--run-dir", str(tmp_path / "sac")),
        *("--max-env-steps", "64", "--eval-every", "64", "--eval-episodes", "1", "--set", "min_replay_size=32"),
    )
    assert seeded["dataset"]["steps"] == 1000 and seeded["env_steps"] >= 64 and seeded["learner_steps"] > 0


def test_the_cli_documents_dataset(capsys):
    assert main(["train", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "--dataset PATH" in text and "count learner steps" in text


def test_a_distributed_program_refuses_a_dataset(cartpole_dataset):
    import time

    from shoal.launch.experiments.config import experiment_config
    from shoal.launch.experiments.distributed.preflight import prepare
    from shoal.launch.experiments.distributed.settings import LaunchSettings

    config = experiment_config("dqn", "CartPole-v1", dataset=cartpole_dataset, run_dir=None)
    with pytest.raises(ValueError, match=r"^a run from a dataset \(run.dataset; bc, cql\) runs in one process"):
        prepare(config, LaunchSettings(launcher="processes", num_actors=1), time.time())
