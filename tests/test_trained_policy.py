"""A trained policy out of its run directory: ``load_policy`` (Python), ``shoal evaluate`` (CLI)."""

import csv
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from shoal.launch import run_experiment
from shoal.launch.experiments.config import experiment_config
from shoal.launch.experiments.evaluation import EVAL_SEED_OFFSET
from shoal.launch.experiments.trained_policy import checkpoints
from tests.shoal_cli import run_shoal

pytestmark = pytest.mark.e2e  # real training runs (PPO, QR-DQN), read by `shoal evaluate/export/status` in subprocesses

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")


def trained(tmp_path, agent="ppo", max_env_steps=6000, **settings) -> tuple[str, list[dict]]:
    run_dir = str(tmp_path / agent.replace(":", "-"))
    config = experiment_config(
        agent,
        "CartPole-v1",
        agent_settings=settings,
        seed=0,
        max_env_steps=max_env_steps,
        eval_every=3000,
        eval_episodes=4,
        run_dir=run_dir,
        target_return=10**6,
    )
    run_experiment(config)
    with open(os.path.join(run_dir, "eval.csv")) as f:
        return run_dir, list(csv.DictReader(f))


@pytest.fixture(scope="module")
def ppo_run(tmp_path_factory):
    return trained(tmp_path_factory.mktemp("trained"))


def test_a_loaded_policy_acts_on_one_observation_or_a_batch(ppo_run):
    import gymnasium as gym

    from shoal import load_policy

    run_dir, _ = ppo_run
    policy = load_policy(run_dir)
    env = gym.make("CartPole-v1")
    observation, _ = env.reset(seed=3)
    action = policy(observation)
    assert np.shape(action) == () and env.action_space.contains(int(action))
    batch = np.stack([observation] * 5)
    assert policy(batch).shape == (5,) and (policy(batch) == action).all()  # (greedy: one answer)
    with pytest.raises(ValueError, match=r"observations of shape \(4,\)"):
        policy(np.zeros(3))
    vector = policy.config.make_env(4, seed=0, evaluation=True)  # (the docs' loop)
    observations, _ = vector.reset(seed=0)
    for _ in range(20):
        observations, _, terminated, truncated, _ = vector.step(policy(observations))
        policy.end_episodes(terminated | truncated)
    vector.close()


def test_the_last_checkpoint_reproduces_the_runs_last_evaluation(ppo_run):
    """The run's last evaluation (eval.csv) and ``evaluate_run`` with that evaluation's seed and
    episodes act with the same parameters on the same episodes: the same mean return."""
    from shoal.launch import evaluate_run

    run_dir, rows = ppo_run
    seed = 0 + EVAL_SEED_OFFSET + 7919 * (len(rows) - 1)
    result = evaluate_run(run_dir, episodes=4, seed=seed)
    assert result["return"]["mean"] == pytest.approx(float(rows[-1]["eval_return"]))
    assert result["return"]["min"] == pytest.approx(float(rows[-1]["eval_return_min"]))
    assert result["checkpoint"] == checkpoints(run_dir)[-1] == int(rows[-1]["env_steps"])
    assert result["episodes"] == 4 and result["length"]["min"] >= 1
    assert result["length"]["mean"] == pytest.approx(result["return"]["mean"])  # (CartPole: +1 a step)


def test_shoal_evaluate_prints_one_json_line_and_refuses_a_checkpoint_it_lacks(ppo_run):
    run_dir, _ = ppo_run
    done = run_shoal(
        "evaluate", run_dir, "--episodes", "3", "--seed", "5", "--env-arg", "max_episode_steps=50", timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["episodes"] == 3 and result["seed"] == 5 and result["agent"] == "ppo"
    assert result["length"]["max"] <= 50  # (the changed env argument holds)
    bad = run_shoal("evaluate", run_dir, "--checkpoint", "12345", timeout=300)
    assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [
        f"shoal: error: {run_dir} holds no learner checkpoint 12345; it holds {checkpoints(run_dir)[-1]}"
    ], bad.stderr


def test_a_checkpoint_made_for_other_observations_is_refused_in_one_line(ppo_run, tmp_path):
    """Networks of the same shapes would load a checkpoint made for observations of another
    layout (gymnax's MinAtar planes before they came as frames) and read them wrongly: the
    checkpoint's recorded spec is compared first."""
    import shutil

    from shoal import load_policy

    run_dir = str(tmp_path / "copy")
    shutil.copytree(ppo_run[0], run_dir)
    path = os.path.join(run_dir, "checkpoints", "run.json")
    with open(path) as f:
        run = json.load(f)
    assert run["spec"]["observation"] == [[4], "float32"]
    run["spec"]["observation"] = [[4], "uint8"]
    with open(path, "w") as f:
        json.dump(run, f)
    with pytest.raises(
        ValueError,
        match=r"made for another environment than this Shoal makes of its config: "
        r"observation \[\[4\], 'uint8'\] \(checkpoint\) vs \[\[4\], 'float32'\] \(now\)$",
    ):
        load_policy(run_dir)


CLEAN_LOAD = """
import sys
sys.modules["shoal"] = None  # (this program cannot import Shoal)
import numpy as np
from jax import export
with open(sys.argv[1], "rb") as f:
    act = export.deserialize(bytearray(f.read()))
np.save(sys.argv[3], np.asarray(act.call(np.load(sys.argv[2]))))
print(sorted({m.split(".")[0] for m, module in sys.modules.items() if module is not None}
             & {"shoal", "tensorflow", "reverb", "gymnasium"}))
"""


def test_an_exported_policy_acts_as_the_loaded_one_in_a_program_without_shoal(ppo_run, tmp_path):
    import gymnasium as gym

    from shoal import load_policy

    run_dir, _ = ppo_run
    out = str(tmp_path / "policy.jax")
    done = run_shoal("export", run_dir, "--out", out, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    about = json.loads(done.stdout.strip().splitlines()[-1])
    with open(out + ".json") as f:
        assert json.load(f) == {k: v for k, v in about.items() if k != "out"}
    assert about["observation"] == {"shape": [4], "dtype": "float32"} and about["action"]["num_actions"] == 2
    space = gym.make("CartPole-v1").observation_space
    space.seed(0)
    observations = np.stack([space.sample() for _ in range(100)])
    np.save(tmp_path / "obs.npy", observations)
    program = tmp_path / "act.py"
    program.write_text(CLEAN_LOAD)
    ran = subprocess.run(
        [sys.executable, str(program), out, str(tmp_path / "obs.npy"), str(tmp_path / "actions.npy")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=str(tmp_path),
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert ran.stdout.strip().splitlines()[-1] == "[]"  # (JAX and NumPy only)
    assert (np.load(tmp_path / "actions.npy") == load_policy(run_dir)(observations)).all()


def test_shoal_export_refuses_a_directory_or_a_missing_one_in_one_line(ppo_run, tmp_path):
    from shoal.launch import export_policy

    run_dir, _ = ppo_run
    with pytest.raises(ValueError, match="is a directory: give a file name"):
        export_policy(run_dir, str(tmp_path))
    with pytest.raises(ValueError, match="does not exist"):
        export_policy(run_dir, str(tmp_path / "nowhere" / "policy.jax"))
    with pytest.raises(ValueError, match="--batch-size must be a positive integer"):
        export_policy(run_dir, str(tmp_path / "policy.jax"), batch_size=0)
    assert not os.listdir(tmp_path)


def test_a_plug_in_agents_policy_loads_when_named_again(tmp_path, monkeypatch):
    from shoal import load_policy

    monkeypatch.syspath_prepend(EXAMPLES)
    run_dir, _ = trained(tmp_path, "qrdqn_agent:QRDQNBuilder", max_env_steps=3000)
    with pytest.raises(ValueError, match="names agent 'qrdqn_agent:QRDQNBuilder'"):
        load_policy(run_dir)  # (nothing the directory alone names is imported)
    policy = load_policy(run_dir, agent="qrdqn_agent:QRDQNBuilder")
    assert policy(np.zeros(4, np.float32)) in (0, 1)


def test_shoal_status_says_where_an_ended_or_stopped_one_process_run_stands(ppo_run, tmp_path):
    import shutil

    run_dir, rows = ppo_run
    done = run_shoal("status", run_dir, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    assert (
        lines[0] == "run: ppo on CartPole-v1, seed 0 (one process; native replay)"
        or lines[0] == "run: ppo on CartPole-v1, seed 0 (one process; reverb replay)"
    ), lines
    assert lines[1].startswith("state: ended, out of budget (")
    assert "env steps: 6,000 of 6,000" in lines
    last = float(rows[-1]["eval_return"])
    assert any(line.startswith(f"last evaluation: return {last:.4g} at 6,000 env steps") for line in lines), lines
    assert lines[-1].startswith("logs: ")
    stopped = tmp_path / "stopped"  # (as a killed run leaves it: no result.json)
    shutil.copytree(run_dir, stopped)
    os.unlink(stopped / "result.json")
    done = run_shoal("status", str(stopped), timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "shoal train --resume continues it from its last checkpoint" in done.stdout.splitlines()[1]
