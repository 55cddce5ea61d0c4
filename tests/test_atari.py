"""Atari from pixels: uint8 frames from the env through Reverb to the learner, the protocol's
evaluation of unclipped whole games, a convolutional network that learns a cheap pixel task,
and one clear line without the atari extra."""

import json
import os

import jax
import numpy as np
import pytest

from shoal.actors import EnvironmentLoop
from shoal.core.specs import make_environment_spec
from shoal.launch import ExperimentConfig, run_experiment
from shoal.launch.experiments.config import experiment_config
from shoal.replay import make_replay_server, without_insert_blocking
from tests.shoal_cli import run_shoal

pytest.importorskip("ale_py")


@pytest.mark.e2e  # (the data path end to end: Atari's env, an actor, a real replay table and its dataset)
@pytest.mark.parametrize("agent", ["dqn", "ppo"])
def test_frames_stay_uint8_through_reverb(agent):
    config = experiment_config(
        agent,
        "ALE/Pong-v5",
        num_envs=2,
        agent_settings={"min_replay_size": 8} if agent == "dqn" else {"rollout_length": 8, "num_minibatches": 2},
    )
    builder, env = config.builder, config.make_env(2, 0)
    spec = make_environment_spec(env)
    assert spec.observation.shape == (4, 84, 84) and spec.observation.dtype == np.uint8
    networks = builder.make_networks(spec)
    policy = builder.make_policy(networks, spec, evaluation=False)
    server = make_replay_server(without_insert_blocking(builder.make_replay_tables(spec, policy)))  # (no learner here)
    try:
        adder = builder.make_adder(server.client, spec, policy)
        actor = builder.make_actor(
            jax.random.PRNGKey(0), policy, spec, _Params(builder, networks), adder, asynchronous_updates=False
        )
        loop = EnvironmentLoop(env, actor)
        for _ in range(40):
            loop.step()
        adder.flush()
        dataset = builder.make_dataset_iterator(server.client, spec)
        sample = next(dataset)  # a real sample from a real table
        dataset.close()
        adder.close()
    finally:
        server.stop()
        env.close()
    for name in ("observation", "next_observation"):
        frames = sample.data[name]
        assert frames.dtype == np.uint8 and frames.shape[-3:] == (4, 84, 84), (name, frames.dtype, frames.shape)
        assert frames.max() > 0  # real frames, not zeros
    assert np.abs(sample.data["reward"]).max() <= 1.0  # training rewards are clipped


class _Params:
    """A variable source holding freshly initialized parameters (no learner needed)."""

    def __init__(self, builder, networks):
        learner = builder.make_learner(jax.random.PRNGKey(1), networks, iter([]))
        self._params = learner.get_variables()[1]
        learner.close()

    def get_variables(self, known_version=-1):
        return 0, self._params


@pytest.mark.e2e
def test_a_convolutional_agent_learns_a_pixel_task_and_evaluates_unclipped(tmp_path):
    # Rewards of 5, clipped to 1 for training; the evaluation reports the game's own return, so a
    # good policy's is above the 8 a clipped episode could reach at most.
    from shoal.agents import get_builder

    config = ExperimentConfig.from_flat(
        builder=get_builder("ppo", rollout_length=8, num_minibatches=2, num_epochs=4, learning_rate=1e-3),
        env_id="tests.pixel_env:LitSide-v0",
        num_envs=8,
        seed=0,
        max_env_steps=3_072,
        eval_every=512,
        eval_episodes=8,
        target_return=38.0,
        clip_rewards=True,
        run_dir=str(tmp_path / "run"),
        progress=False,
    )
    result = run_experiment(config)
    with open(tmp_path / "run" / "eval.csv") as f:
        evals = [float(line.split(",")[1]) for line in f.read().splitlines()[1:]]
    # A policy that has not learned which side is lit is right half the time (about 20, and 38 or
    # more in fewer than one in a billion evaluations); this one is right nearly every time.
    assert max(evals) >= 38, evals
    assert result["final_eval_return"] > 8  # unclipped


@pytest.mark.e2e
def test_without_the_atari_extra_one_line_names_it(tmp_path):
    fake = tmp_path / "site"
    (fake / "ale_py").mkdir(parents=True)
    (fake / "ale_py" / "__init__.py").write_text("raise ImportError('no ale_py here')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(fake), os.environ.get("PYTHONPATH", "")]))
    proc = run_shoal(
        "train", "--agent", "ppo", "--env", "ALE/Breakout-v5", "--run-dir", str(tmp_path / "run"), timeout=120, env=env
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("shoal: error:")]
    assert errors == [
        "shoal: error: ALE/Breakout-v5 needs the 'atari' extra, which is not installed; run "
        "pip install -e '.[atari]' (from the Shoal repository)"
    ], proc.stderr[-2000:]
    assert not (tmp_path / "run").exists()


@pytest.mark.e2e
@pytest.mark.slow  # (CI time, ~45 s: a whole game of Pong evaluated; -m slow runs it)
def test_an_atari_run_reports_its_protocol(tmp_path):
    # Pong's games end within a few thousand frames whatever the policy (Breakout's can last
    # 108k frames for a policy that never serves): a whole-game evaluation stays short.
    proc = run_shoal(
        "train",
        "--agent",
        "dqn",
        "--env",
        "ALE/Pong-v5",
        "--max-env-steps",
        "512",
        "--eval-episodes",
        "1",
        "--set",
        "min_replay_size=256",
        "--quiet",
        "--run-dir",
        str(tmp_path / "run"),
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["protocol"]["sticky_actions"] == 0.25 and "unclipped" in result["protocol"]["evaluation"]
    assert result["final_eval_return"] <= -10  # a whole game of Pong, lost: -21 to about -19 untrained
    assert json.loads((tmp_path / "run" / "config.json").read_text())["preset"] == "dqn/atari"
