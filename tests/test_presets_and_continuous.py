"""Presets, and PPO's normalization statistics: a preset resolving to what it names with --set
and flags after it, the presets in --help, and the statistics surviving a resume bit for bit.
(The Gaussian's density and the statistics' update by hand: tests/test_returns.py.)"""

import contextlib
import io
import json

import jax
import numpy as np
import pytest

from shoal.agents.ppo import PPOBuilder, PPOConfig
from shoal.launch import ExperimentConfig, run_experiment
from shoal.launch.experiments.cli.main import main
from shoal.launch.experiments.config import experiment_config
from shoal.launch.experiments.run_directory.config_record import flat_record
from tests.shoal_cli import run_shoal


def test_a_preset_resolves_to_what_it_names_and_flags_and_set_come_after_it():
    config = experiment_config("ppo", "HalfCheetah-v5")  # auto: the mujoco family
    assert config.preset == "ppo/mujoco" and config.builder.config.normalize_observations
    assert (config.builder.config.rollout_length, config.builder.config.num_epochs, config.env.num_envs) == (
        128,
        10,
        16,
    )
    assert experiment_config("ppo", "HalfCheetah-v5", "none").builder.config == PPOConfig()
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        rc = main(
            [
                "train",
                "--agent",
                "ppo",
                "--env",
                "LunarLander-v3",
                "--dry-run",
                "--num-envs",
                "8",
                "--set",
                "learning_rate=1e-3",
                "--set",
                "num_minibatches=128",
            ]
        )
    resolved = flat_record(json.loads(out.getvalue().splitlines()[0]))  # (read by flat name)
    assert rc == 0 and resolved["preset"] == "ppo/box2d"
    assert (
        resolved["agent_config"]["rollout_length"] == 1024 and resolved["agent_config"]["discount"] == 0.999
    )  # preset
    assert resolved["agent_config"]["learning_rate"] == 1e-3 and resolved["num_envs"] == 8  # --set, a flag
    assert resolved["eval_every"] == 32_768 and resolved["max_env_steps"] == 1_000_000  # the preset's experiment
    with pytest.raises(ValueError, match="sac has no preset 'atari'; its presets: brax, classic, mujoco"):
        experiment_config("sac", "Pendulum-v1", "atari")


def test_shoal_train_help_lists_the_presets():
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(["train", "--help"])
    assert "ppo: classic, box2d, mujoco" in " ".join(out.getvalue().split())


@pytest.mark.e2e
def test_normalization_statistics_survive_a_resume_bit_for_bit(tmp_path):
    class Keep(PPOBuilder):  # keeps the learner, and the statistics right after its restore
        def make_learner(self, *args, **kwargs):
            learner = super().make_learner(*args, **kwargs)
            restore = learner.restore

            def restored(saved):
                restore(saved)
                Keep.restored = jax.device_get(learner.get_variables()[1]["observation"])

            learner.restore, Keep.learner = restored, learner
            return learner

    builder = Keep(PPOConfig(normalize_observations=True, normalize_rewards=True, rollout_length=16, num_minibatches=2))
    config = ExperimentConfig.from_flat(
        builder=builder,
        env_id="Pendulum-v1",
        num_envs=4,
        max_env_steps=640,
        eval_every=10**6,
        eval_episodes=2,
        target_return=1e9,
        run_dir=str(tmp_path / "run"),
        progress=False,
    )
    run_experiment(config)
    saved = jax.device_get(Keep.learner.save()["state"].params["observation"])
    assert float(saved["count"]) > 600 and np.all(np.asarray(saved["var"]) != 1.0)  # they did change
    run_experiment(config.replace(resume=True, max_env_steps=960))
    for a, b in zip(jax.tree_util.tree_leaves(saved), jax.tree_util.tree_leaves(Keep.restored)):
        np.testing.assert_array_equal(a, b)


# Distributed, a queue of one rollout holds the actors back: without the learner taking rollouts
# they step at most 3 of the budget's 8 (one queued, two waiting to be), so the budget is spent
# only after the learner has finished updates (rather than racing its first one).
@pytest.mark.parametrize(
    "launch",
    [
        ["--max-env-steps", "4096"],
        pytest.param(
            ["--max-env-steps", "16384", "--set", "queue_capacity=1", "--launcher", "processes", "--num-actors", "2"],
            marks=pytest.mark.slow,
        ),
    ],
)  # (~30 s: -m slow)
@pytest.mark.e2e
def test_ppo_trains_a_gaussian_policy_on_mujoco(tmp_path, launch):
    proc = run_shoal(
        "train",
        "--agent",
        "ppo",
        "--env",
        "HalfCheetah-v5",
        "--eval-every",
        "100000",
        "--eval-episodes",
        "2",
        "--quiet",
        "--run-dir",
        str(tmp_path / "run"),
        *launch,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["env_steps"] >= 4096 and result["learner_steps"] > 0 and result["final_eval_return"] is not None
    saved = json.loads((tmp_path / "run" / "config.json").read_text())
    assert saved["preset"] == "ppo/mujoco" and saved["agent_config"]["normalize_observations"]


@pytest.mark.parametrize("agent", ["ppo", "impala"])
def test_eval_sample_evaluates_the_policys_samples_and_atari_presets_use_it(agent):
    # (A greedy Breakout policy that never serves plays every evaluation game to the frame cap.)
    from shoal.agents import get_builder
    from shoal.core.specs import make_environment_spec
    from shoal.core.types import ActorInfo

    assert experiment_config(agent, "ALE/Breakout-v5").builder.config.eval_sample
    assert experiment_config("dqn", "ALE/Breakout-v5").builder.config.eval_epsilon == 0.05
    config = experiment_config(agent, "CartPole-v1", agent_settings={"learning_rate": 1e-3})
    env = config.make_env(64, 0)
    spec = make_environment_spec(env)
    obs = np.repeat(env.reset(seed=0)[0][:1], 64, axis=0)  # one observation, 64 times
    info = ActorInfo(env_steps=0, params_version=0)
    actions = {}
    for sample in (False, True):
        builder = get_builder(agent, eval_sample=sample)
        networks = builder.make_networks(spec)
        learner = builder.make_learner(jax.random.PRNGKey(0), networks, iter([]))
        params = learner.get_variables()[1]
        learner.close()
        policy = builder.make_policy(networks, spec, evaluation=True)
        actions[sample], extras, _ = policy.apply(params, jax.random.PRNGKey(1), obs, info)
        assert extras == {}
    assert len(set(np.asarray(actions[False]).tolist())) == 1  # the most likely action, for every copy
    assert len(set(np.asarray(actions[True]).tolist())) == 2  # an untrained policy's samples: both actions
