"""Recurrent PPO (``lstm_size > 0``) in the compiled loop (``--launcher anakin``): each env's LSTM
state rides in the scan's carry, starts again where an episode began, and the state a rollout
started from is what PPO's own recurrent update unrolls from; it learns a task one frame cannot
tell (CartPole without its velocities), a seeded run is the same twice and a resumed run
continues exactly (the states are in the checkpoint).

gymnax is installed without its dependencies (docs/anakin.md): CI, which installs ``.[dev]``,
skips this file."""

import csv
import dataclasses
import json

import pytest

gymnax = pytest.importorskip("gymnax", reason="gymnax is installed --no-deps, outside .[dev] (docs/anakin.md)")

import jax.numpy as jnp  # noqa: E402 -- (after the skip)
import numpy as np  # noqa: E402
from gymnax.environments import spaces  # noqa: E402
from gymnax.environments.classic_control.cartpole import CartPole  # noqa: E402

from shoal.agents.ppo import learning  # noqa: E402
from shoal.agents.ppo.builder import PPOBuilder  # noqa: E402
from shoal.launch.experiments.anakin import run_anakin  # noqa: E402
from shoal.launch.experiments.cli.main import main  # noqa: E402
from shoal.launch.experiments.config import experiment_config  # noqa: E402

NO_VELOCITY = "ShoalCartPoleNoVelocity-v0"


class CartPoleNoVelocity(CartPole):
    """gymnax's CartPole observing only the cart's position and the pole's angle (a memory task:
    feed-forward PPO stays near 45 on it; ``shoal/CartPoleNoVelocity-v1`` is the gymnasium one)."""

    def get_obs(self, state, params=None, key=None):
        return jnp.array([state.x, state.theta])

    def observation_space(self, params):
        high = jnp.array([params.x_threshold * 2, params.theta_threshold_radians * 2])
        return spaces.Box(-high, high, (2,), jnp.float32)


@pytest.fixture(scope="module", autouse=True)
def setup():
    """The suite's JAX cache (as ``shoal train`` enables it) and the memory task registered."""
    from shoal.launch.experiments.compilation_cache import enable_compilation_cache

    enable_compilation_cache()
    if NO_VELOCITY not in gymnax.registered_envs:
        gymnax.register(NO_VELOCITY, CartPoleNoVelocity)


def rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.e2e  # (a training run to the solve)
def test_recurrent_ppo_learns_cartpole_without_velocities(tmp_path):
    """The ``ppo/memory`` preset (an LSTM of 64) balances the velocity-free pole (seed 0 on this
    CPU: 30, 31, 139, 281, 463, 500 at 2,304 env steps apart; solved at 13,824)."""
    config = experiment_config(
        "ppo",
        f"gymnax:{NO_VELOCITY}",
        preset="memory",
        seed=0,
        max_env_steps=40_000,
        target_return=475,
        run_dir=str(tmp_path / "run"),
        progress=False,
    )
    assert config.builder.config.lstm_size == 64
    result = run_anakin(config)
    assert result["solved"] and result["final_eval_return"] >= 475 and result["launcher"] == "anakin", result


@pytest.mark.e2e  # (a short training run)
def test_the_update_unrolls_from_the_states_the_rollout_acted_from(tmp_path):
    """With one SGD step per update (on the params the rollout acted with), PPO's recurrent update,
    unrolling each env sequence from its stored first state and resetting where an episode began,
    gives back every action's log-probability the acting policy recorded: ``log rho`` is 0. It
    would not be had the loop carried no state across its iterations (rollouts of 32 steps,
    later ones start from a state that is not zero), or not started it again where an episode
    ended (CartPole's first episodes end within 32 steps)."""
    gaps = []

    def loss(networks, params, minibatch, rng, config, clip_epsilon):
        value, metrics = learning.ppo_loss(networks, params, minibatch, rng, config, clip_epsilon)
        policy_out, _ = learning.forward(networks, params, minibatch)
        log_rho = learning.head(networks).log_prob(policy_out, minibatch["action"]) - minibatch["log_prob"]
        gaps.append(True)  # (traced: the loop called this loss)
        return value, {**metrics, "max_log_rho": jnp.max(jnp.abs(log_rho))}

    class Checked(PPOBuilder):
        pass

    Checked.loss = staticmethod(loss)
    config = experiment_config(
        "ppo",
        "gymnax:CartPole-v1",
        agent_settings={"lstm_size": 16, "num_epochs": 1, "num_minibatches": 1, "hidden_sizes": (32,)},
        seed=0,
        num_envs=8,
        max_env_steps=4096,
        eval_every=1024,
        eval_episodes=2,
        target_return=1e9,
        run_dir=str(tmp_path / "run"),
        progress=False,
    )
    run_anakin(dataclasses.replace(config, builder=Checked(config.builder.config)))
    assert gaps
    logged = rows(tmp_path / "run" / "learner.csv")
    assert len(logged) == 4 and all(float(r["max_log_rho"]) < 1e-4 for r in logged), logged
    assert sum(int(r["episodes"]) for r in rows(tmp_path / "run" / "train.csv")) > 8  # (episodes ended)


def short(run_dir, max_env_steps=4096):
    return experiment_config(
        "ppo",
        "gymnax:CartPole-v1",
        agent_settings={"lstm_size": 16},
        seed=0,
        max_env_steps=max_env_steps,
        eval_every=1024,
        target_return=1e9,
        run_dir=str(run_dir),
        progress=False,
    )


@pytest.mark.e2e  # (four short training runs)
def test_a_seeded_run_is_the_same_twice_and_resumes_exactly(tmp_path, monkeypatch):
    """Two runs of one seed log the same rows; one stopped at 2,048 env steps and resumed with
    ``shoal train --resume`` to 4,096 logs the rows of the run that never stopped: each env's
    LSTM state is in the checkpoint of the carry."""
    monkeypatch.chdir(tmp_path)
    for name in ("whole", "again"):
        run_anakin(short(tmp_path / name))
    run_anakin(short(tmp_path / "parts", max_env_steps=2048))
    assert main(["train", "--resume", str(tmp_path / "parts"), "--max-env-steps", "4096", "--quiet"]) == 0
    for name, columns in (("eval.csv", ["env_steps", "eval_return"]), ("learner.csv", ["learner_steps", "loss"])):
        whole = [[r[c] for c in columns] for r in rows(tmp_path / "whole" / name)]
        assert len(whole) == 4, name
        for other in ("again", "parts"):
            assert [[r[c] for c in columns] for r in rows(tmp_path / other / name)] == whole, (name, other)


@pytest.mark.e2e  # (`shoal train` and `shoal evaluate`, in this process)
def test_shoal_train_and_evaluate_a_recurrent_run(tmp_path, capsys, monkeypatch):
    """``shoal train --set lstm_size=...`` runs in the compiled loop (the default for a JAX env),
    and ``shoal evaluate`` plays the run's first evaluation again, exactly (its recurrent greedy
    policy, state carried, in the run's own compiled evaluation)."""
    monkeypatch.chdir(tmp_path)
    run = str(tmp_path / "run")
    flags = ["--max-env-steps", "1024", "--eval-every", "1024", "--eval-episodes", "4", "--target-return", "1e9"]
    args = ["train", "--agent", "ppo", "--env", "gymnax:CartPole-v1", "--set", "lstm_size=16", *flags, "--quiet"]
    assert main([*args, "--run-dir", run]) == 0
    capsys.readouterr()
    logged = rows(tmp_path / "run" / "eval.csv")[0]
    assert main(["evaluate", run, "--episodes", "4", "--seed", str(1_000_003), "--checkpoint", "1024"]) == 0
    evaluated = json.loads(capsys.readouterr().out)
    assert np.float32(evaluated["return"]["mean"]) == np.float32(logged["eval_return"]), (evaluated, logged)
    assert evaluated["return"]["min"] == float(logged["eval_return_min"])


def test_what_recurrent_anakin_refuses_is_one_line(tmp_path, capsys, monkeypatch):
    """Minibatches of recurrent PPO are whole env sequences: a ``num_minibatches`` that does not
    divide the envs is one line, exit 2, nothing written."""
    monkeypatch.chdir(tmp_path)
    args = ["--set", "lstm_size=8", "--set", "num_minibatches=3", "--run-dir", str(tmp_path / "run")]
    assert main(["train", "--agent", "ppo", "--env", "gymnax:CartPole-v1", *args]) == 2
    errors = capsys.readouterr().err.strip().splitlines()
    assert len(errors) == 1 and "num_minibatches=3 must divide the 16 env sequences" in errors[0], errors
    assert not (tmp_path / "run").exists()
