"""``shoal record RUN_DIR --episodes N --out DIR``: a trained policy's episodes as a Minari
dataset that ``minari`` reads unchanged (by path, and by id under ``MINARI_DATASETS_PATH``), the
same dataset for the same command; what it refuses, in one line, with nothing written.

The recordings need the ``offline`` extra (minari) and skip without it; the refusals of bad
arguments run everywhere."""

import json
import os
import sys

import numpy as np
import pytest
from packaging.version import Version

from shoal.launch.experiments.cli.main import main


def _train(tmp_path, agent, env_id, steps, env_args=None, settings=None) -> str:
    from shoal.launch import run_experiment
    from shoal.launch.experiments.config import experiment_config

    run_dir = str(tmp_path / "run")
    config = experiment_config(
        agent,
        env_id,
        agent_settings=settings or {},
        seed=0,
        max_env_steps=steps,
        eval_every=10**6,
        eval_episodes=1,
        env_args=env_args or {},
        run_dir=run_dir,
        target_return=10**6,
        progress=False,
    )
    run_experiment(config)
    return run_dir


def _record(capsys, *argv: str) -> dict:
    assert main(["record", *argv]) == 0, capsys.readouterr().err[-3000:]
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def _one_error_line(capsys) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("shoal: error: "), lines
    return lines[0]


@pytest.mark.e2e
def test_a_recorded_dataset_loads_in_minari_and_holds_the_policys_episodes(tmp_path, capsys, monkeypatch):
    minari = pytest.importorskip("minari", reason="the offline extra")
    from shoal import load_policy

    run_dir = _train(tmp_path, "dqn", "CartPole-v1", 1000, settings={"min_replay_size": 200})
    out = str(tmp_path / "datasets" / "cartpole-dqn-v0")
    os.makedirs(os.path.dirname(out))
    about = _record(capsys, run_dir, "--episodes", "6", "--out", out)
    assert about["episodes"] == 6 and about["dataset_id"] == "cartpole-dqn-v0" and about["env_spec"] is True
    dataset = minari.MinariDataset(os.path.join(out, "data"))
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "datasets"))
    by_id = minari.load_dataset("cartpole-dqn-v0")
    assert dataset.total_episodes == by_id.total_episodes == 6 and dataset.total_steps == about["steps"]
    assert dataset.spec.env_spec.id == "CartPole-v1" and dataset.recover_environment().spec.id == "CartPole-v1"
    policy = load_policy(run_dir)
    returns = []
    for episode in dataset.iterate_episodes():
        steps = len(episode.actions)
        assert episode.observations.shape == (steps + 1, 4) and episode.rewards.shape == (steps,)
        assert episode.terminations[-1] or episode.truncations[-1]
        assert not (episode.terminations[:-1] | episode.truncations[:-1]).any()
        assert (episode.actions == policy(episode.observations[:-1])).all()  # (greedy: the policy's actions)
        returns.append(episode.rewards.sum())
    assert about["return"]["mean"] == pytest.approx(np.mean(returns))
    again = str(tmp_path / "again")
    _record(capsys, run_dir, "--episodes", "6", "--out", again)  # (seeded: the same dataset)
    for a, b in zip(dataset.iterate_episodes(), minari.MinariDataset(os.path.join(again, "data")).iterate_episodes()):
        assert (a.observations == b.observations).all() and (a.actions == b.actions).all()
    explored = _record(capsys, run_dir, "--episodes", "6", "--out", str(tmp_path / "explored"), "--epsilon", "1")
    assert explored["epsilon"] == 1.0 and explored["steps"] != about["steps"]  # (uniformly random actions)
    assert sorted(os.listdir(tmp_path)) == ["again", "datasets", "explored", "run"]  # (no staging left)


@pytest.mark.e2e
def test_dict_observations_with_an_image_and_a_mask_are_recorded_exactly(tmp_path, capsys):
    minari = pytest.importorskip("minari", reason="the offline extra")
    from shoal import load_policy

    env_id, env_args = "tests.dict_env:DictCartPole-v0", {"masked": True, "max_episode_steps": 30}
    run_dir = _train(tmp_path, "dqn", env_id, 400, env_args=env_args, settings={"min_replay_size": 200})
    out = str(tmp_path / "dict-v0")
    argv = ["record", run_dir, "--episodes", "3", "--out", out, "--env", env_id, "--epsilon", "0.5"]
    if Version(minari.__version__) < Version("0.5.4"):  # (it JPEG-encodes every uint8 image: refused, nothing written)
        assert main(argv) == 2 and "stores uint8 images as JPEG" in _one_error_line(capsys)
        assert sorted(os.listdir(tmp_path)) == ["run"]
        return
    about = _record(capsys, *argv[1:])
    dataset = minari.MinariDataset(os.path.join(out, "data"))
    assert dataset.total_episodes == 3 and set(dataset.observation_space.spaces) == {
        "cart",
        "pole",
        "pixels",
        "action_mask",
    }
    episode = next(dataset.iterate_episodes())
    pixels = episode.observations["pixels"]
    assert pixels.dtype == np.uint8 and set(np.unique(pixels)) == {0, 255}  # (stored as they are: no JPEG)
    steps = len(episode.actions)
    assert all(len(v) == steps + 1 for v in episode.observations.values())
    masks = episode.observations["action_mask"][:-1]
    assert masks[np.arange(steps), episode.actions].all()  # (random actions too are allowed ones)
    assert about["policy"] == "greedy" and load_policy(run_dir, env_id=env_id).spec.num_actions == 2


def test_bad_arguments_are_one_line_and_nothing_is_written(tmp_path, capsys):
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.json").write_text("{}")
    out = str(tmp_path / "data-v0")
    cases = [
        (["--episodes", "0", "--out", out], "--episodes must be in [1, 1,000,000], got 0"),
        (["--episodes", "2", "--out", out, "--epsilon", "1.5"], "--epsilon must be in [0, 1], got 1.5"),
        (["--episodes", "2", "--out", out, "--dataset-id", "no version"], "is not a Minari dataset id"),
        (["--episodes", "2", "--out", out, "--seed", "-1"], "--seed must be in [0, "),
    ]
    for argv, message in cases:
        assert main(["record", str(run), *argv]) == 2
        assert message in _one_error_line(capsys)
    assert sorted(os.listdir(tmp_path)) == ["run"]


def test_an_out_that_exists_or_lies_in_a_run_directory_is_one_line(tmp_path, capsys):
    pytest.importorskip("minari", reason="the offline extra")
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.json").write_text("{}")
    for out, message in [
        (str(run), "exists: shoal record writes a new dataset directory"),
        (str(run / "checkpoints" / "data-v0"), "is inside the run directory"),
        (str(tmp_path / "nowhere" / "data-v0"), "does not exist"),
    ]:
        assert main(["record", str(run), "--episodes", "2", "--out", out]) == 2
        assert message in _one_error_line(capsys)
    assert sorted(os.listdir(tmp_path)) == ["run"] and sorted(os.listdir(run)) == ["checkpoints", "config.json"]


def test_record_without_the_extra_names_it_in_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "minari", None)  # (as if not installed)
    assert main(["record", str(tmp_path), "--episodes", "2", "--out", str(tmp_path / "d-v0")]) == 2
    assert "shoal record needs the offline extra (minari is missing): pip install 'shoal[offline]'" in _one_error_line(
        capsys
    )
    assert os.listdir(tmp_path) == []


@pytest.mark.e2e
@pytest.mark.skipif(sys.version_info < (3, 12), reason="the page's figures: Python 3.12, seeded native replay")
def test_the_offline_data_pages_worked_example_prints_what_it_says(tmp_path):
    """docs/offline-data.md's commands and its program, verbatim: the counts and quantiles its
    comments give (the quickstart's run is the same run on this stack)."""
    pytest.importorskip("minari", reason="the offline extra")
    import re
    import subprocess

    from tests.shoal_cli import run_shoal

    with open(
        os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "offline-data.md")
    ) as f:
        page = f.read()
    commands = next(b for b in re.findall(r"```bash\n(.*?)```", page, re.S) if "shoal record" in b)
    for line in commands.strip().splitlines():
        argv = line.split("#")[0].split()
        if argv[0] == "mkdir":
            os.makedirs(tmp_path / argv[-1])
            continue
        done = run_shoal(*argv[1:], timeout=600, cwd=str(tmp_path))
        assert done.returncode == 0, done.stderr[-2000:]
    recorded = json.loads(done.stdout.strip().splitlines()[-1])
    quoted = json.loads(next(b for b in re.findall(r"```json\n(.*?)```", page, re.S) if '"dataset_id"' in b))
    assert recorded == quoted
    program = next(b for b in re.findall(r"```python\n(.*?)```", page, re.S) if "load_dataset" in b)
    (tmp_path / "load.py").write_text(program)
    ran = subprocess.run(
        [sys.executable, "load.py"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=str(tmp_path),
        env={**os.environ, "MINARI_DATASETS_PATH": str(tmp_path / "datasets")},
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    printed = ran.stdout.strip().splitlines()
    said = re.findall(r"print\(.*\)  # (.*)", program)
    assert printed == said, (printed, said)
