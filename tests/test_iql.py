"""The offline agent ``iql`` (implicit Q-learning): its losses on hand-made numbers, and, end to
end, trained from the CLI on small Minari datasets -- CartPole (discrete: a softmax policy) and
Pendulum (continuous: a Gaussian whose mean is squashed into the Box) -- resumed, exported,
evaluated and loaded as every agent's run.

The end-to-end tests need the ``offline`` extra (minari) and skip without it; the unit tests do not.
"""

from __future__ import annotations

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from shoal.agents.iql.learning import awr_weights, expectile_loss
from shoal.launch.experiments.cli.main import main
from tests.minari_datasets import collect

# --- the losses, on hand-made numbers


def test_the_expectile_loss_weighs_errors_below_by_one_minus_tau_and_its_minimum_is_the_expectile():
    u = jnp.array([-2.0, -1.0, 0.0, 1.0, 2.0])
    assert np.allclose(expectile_loss(u, 0.7), [0.3 * 4, 0.3 * 1, 0.0, 0.7 * 1, 0.7 * 4])
    assert np.allclose(expectile_loss(u, 0.5), 0.5 * u**2)  # (tau 0.5: half the squared error)
    # targets {0, 1}: the v minimizing mean |tau - 1(x - v < 0)| (x - v)^2 is tau itself
    targets = jnp.array([0.0, 1.0])
    grad = jax.grad(lambda v: jnp.mean(expectile_loss(targets - v, 0.7)))
    assert abs(float(grad(0.7))) < 1e-6 and float(grad(0.6)) < 0 < float(grad(0.8))


def test_the_awr_weights_are_exp_beta_advantage_clipped_without_overflow():
    advantage = jnp.array([-1.0, 0.0, 1.0, 10.0, 1e6])
    weights = np.asarray(awr_weights(advantage, 3.0, 100.0))
    assert np.allclose(weights, [np.exp(-3.0), 1.0, np.exp(3.0), 100.0, 100.0], rtol=1e-5)
    assert np.allclose(awr_weights(advantage, 0.0, 100.0), 1.0)  # (beta 0: behaviour cloning)
    assert np.isfinite(np.asarray(jax.grad(lambda a: awr_weights(a, 3.0, 100.0).sum())(advantage))).all()


def _batch(spec, rng: np.random.Generator, rows: int = 8) -> dict:
    observation = rng.normal(size=(rows, *spec.observation.shape)).astype(np.float32)
    if spec.num_actions is not None:
        action = rng.integers(spec.num_actions, size=rows).astype(np.int32)
    else:
        action = rng.uniform(-2, 2, size=(rows, *spec.action.shape)).astype(np.float32)
    return {
        "observation": observation,
        "action": action,
        "reward": np.ones(rows, np.float32),
        "discount": np.full(rows, 0.99, np.float32),
        "next_observation": observation + 0.1,
    }


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_with_beta_0_the_policy_loss_is_the_datas_negative_log_likelihood_and_each_loss_reaches_its_own_network(
    env_id,
):
    from shoal.agents import get_builder
    from shoal.agents.iql.learning import iql_loss, log_prob
    from shoal.launch.experiments.config import experiment_config

    builder = get_builder("iql", beta=0.0, hidden_sizes=(8,))
    spec = experiment_config("iql", env_id, run_dir=None).environment_spec()
    networks = builder.make_networks(spec)
    state = builder.init_state(jax.random.PRNGKey(0), networks)
    batch = _batch(spec, np.random.default_rng(0))
    trained = {"policy": state.params, "value": state.value_params, "critic": state.critic_params}
    loss, metrics = iql_loss(networks, trained, state.target_critic_params, batch, builder.config)
    nll = -jnp.mean(log_prob(networks, state.params, batch["observation"], batch["action"]))
    assert np.isclose(metrics["policy_loss"], nll) and np.isclose(metrics["weight_mean"], 1.0)
    assert np.isclose(loss, metrics["value_loss"] + metrics["critic_loss"] + metrics["policy_loss"])
    if spec.num_actions is not None:  # (a softmax over the actions: -log of 1/2 for a fresh, near-uniform one)
        assert abs(float(nll) - np.log(2)) < 0.2
    # each term's gradient reaches its own params only (the others' are zero)
    terms = ("value_loss", "critic_loss", "policy_loss")
    jacobian = jax.jit(
        jax.jacrev(
            lambda p: jnp.stack(
                [iql_loss(networks, p, state.target_critic_params, batch, builder.config)[1][t] for t in terms]
            )
        )
    )(trained)  # (each leaf [3, ...]: row i, term i's gradient)
    for i, own in enumerate(("value", "critic", "policy")):
        for name, grads in jacobian.items():
            largest = max(float(jnp.abs(g[i]).max()) for g in jax.tree_util.tree_leaves(grads))
            assert (largest > 0) == (name == own), (terms[i], name, largest)


def test_iql_without_a_dataset_is_one_line_and_nothing_is_written(tmp_path, capsys):
    run = str(tmp_path / "run")
    assert main(["train", "--agent", "iql", "--env", "CartPole-v1", "--run-dir", run, "--quiet"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == ["shoal: error: agent 'iql' trains offline, from a dataset: give --dataset PATH (a Minari dataset)"]
    assert not os.path.exists(run)


def test_iql_refuses_an_action_space_it_cannot_squash_into_in_one_line():
    import dataclasses

    import gymnasium as gym

    from shoal.agents import get_builder
    from shoal.launch.experiments.config import experiment_config

    spec = experiment_config("iql", "Pendulum-v1", run_dir=None).environment_spec()
    get_builder("iql").validate(spec, 1)  # (a bounded 1-d Box)
    for space in [gym.spaces.Box(-np.inf, np.inf, (1,)), gym.spaces.Box(-1.0, 1.0, (2, 2))]:
        with pytest.raises(ValueError, match=r"^iql acts in a Discrete action space or a 1-d Box with finite bounds"):
            get_builder("iql").validate(dataclasses.replace(spec, action_space=space), 1)


# --- end to end, from the CLI (e2e: each trains for some seconds)


def _train(capsys, *argv: str) -> dict:
    assert main(["train", *argv, "--quiet"]) == 0, capsys.readouterr().err[-3000:]
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def _learner_log(run: str) -> list[dict]:
    import csv

    with open(os.path.join(run, "learner.csv")) as f:
        return list(csv.DictReader(f))


@pytest.mark.e2e
def test_iql_trains_on_a_cartpole_dataset_resumes_exports_evaluates_and_loads(tmp_path, capsys):
    def balance(observation, rng, space):  # (returns ~200-500; a random action 20% of the time)
        return int(rng.integers(2)) if rng.random() < 0.2 else int(observation[2] + 0.5 * observation[3] > 0)

    dataset = collect(str(tmp_path / "minari"), "CartPole-v1", "cartpole-heuristic-v0", 20, balance)
    import minari

    data = minari.MinariDataset(os.path.join(dataset, "data"))
    run = str(tmp_path / "run")
    flags = ["--max-env-steps", "1000", "--eval-every", "500", "--eval-episodes", "4", "--target-return", "10000"]
    result = _train(capsys, "--agent", "iql", "--env", "CartPole-v1", "--dataset", dataset, "--run-dir", run, *flags)
    assert result["agent"] == "iql" and result["offline"] is True and result["env_steps"] == 0
    assert result["learner_steps"] == 1000 and result["num_evals"] == 2
    assert result["dataset"]["steps"] == data.total_steps
    assert result["dataset"]["transitions"] == 16 * (data.total_steps // 16)  # (single transitions)
    assert result["final_eval_return"] > 100  # (the data's policy balances the pole; beta 10 takes ~600 steps)
    rows = _learner_log(run)
    assert {"value_loss", "critic_loss", "policy_loss", "v_mean", "weight_mean"} <= set(rows[-1])
    assert all(np.isfinite(float(rows[-1][k])) for k in ("value_loss", "critic_loss", "policy_loss"))
    # resumed from its checkpoint (replay and every network's state), no dataset read
    resumed = _train(capsys, "--resume", run, "--max-env-steps", "1500")
    assert resumed["learner_steps"] == 1500 and resumed["num_evals"] == 3 and "dataset" not in resumed
    # exported, evaluated and loaded as every agent's run: the greedy policy, argmax of the logits
    out = str(tmp_path / "policy.jax")
    assert main(["export", run, "--out", out]) == 0, capsys.readouterr().err[-2000:]
    exported = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert exported["agent"] == "iql" and exported["checkpoint"] == 1500
    assert main(["evaluate", run, "--episodes", "2", "--seed", "0"]) == 0, capsys.readouterr().err[-2000:]
    evaluated = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert evaluated["agent"] == "iql" and evaluated["checkpoint"] == 1500 and evaluated["episodes"] == 2
    from jax import export

    from shoal import load_policy

    observations = next(data.iterate_episodes([0])).observations[:-1].astype(np.float32)
    with open(out, "rb") as f:
        artifact = export.deserialize(bytearray(f.read()))
    actions = np.asarray(load_policy(run)(observations))
    assert set(np.unique(actions)) <= {0, 1} and (np.asarray(artifact.call(observations)) == actions).all()


@pytest.mark.e2e
def test_iql_learns_a_continuous_policy_inside_the_box_from_a_pendulum_dataset(tmp_path, capsys):
    """Pendulum's actions from a proportional controller of the pole's angle (minari's
    DataCollector): IQL's greedy action, the Gaussian's squashed mean, follows them."""

    def controller(observation, rng, space):
        return np.clip(-2.0 * observation[1:2] - 0.5 * observation[2:3], -2.0, 2.0).astype(np.float32)

    dataset = collect(str(tmp_path / "minari"), "Pendulum-v1", "pendulum-controller-v0", 5, controller)
    run = str(tmp_path / "run")
    flags = ["--max-env-steps", "600", "--eval-every", "600", "--eval-episodes", "2", "--target-return", "0"]
    result = _train(capsys, "--agent", "iql", "--env", "Pendulum-v1", "--dataset", dataset, "--run-dir", run, *flags)
    assert result["dataset"]["steps"] == 1000 and result["learner_steps"] == 600
    rows = _learner_log(run)
    assert all(np.isfinite(float(rows[-1][k])) for k in ("value_loss", "critic_loss", "policy_loss", "q_mean"))
    import minari

    from shoal import load_policy

    episode = next(minari.MinariDataset(os.path.join(dataset, "data")).iterate_episodes([0]))
    acted = np.asarray(load_policy(run)(episode.observations[:-1].astype(np.float32)))
    assert acted.shape == episode.actions.shape and np.abs(acted).max() <= 2.0
    assert np.abs(acted - episode.actions).mean() < 0.4, np.abs(acted - episode.actions).mean()
    # resumed, and exported as the Gaussian's mean
    resumed = _train(capsys, "--resume", run, "--max-env-steps", "700")
    assert resumed["learner_steps"] == 700
    out = str(tmp_path / "policy.jax")
    assert main(["export", run, "--out", out]) == 0, capsys.readouterr().err[-2000:]
    from jax import export

    with open(out, "rb") as f:
        artifact = export.deserialize(bytearray(f.read()))
    observations = episode.observations[:50].astype(np.float32)
    assert np.allclose(np.asarray(artifact.call(observations)), load_policy(run)(observations), atol=1e-5)


def test_continuous_actions_with_image_observations_are_refused_in_one_line():
    """The continuous critics are SAC's MLPs: images would be read as raw pixels, so such a spec
    is refused at validate (discrete actions read images through the shared torsos)."""
    import gymnasium as gym

    from shoal.agents import get_builder
    from shoal.core.specs import make_environment_spec

    class Spaces:
        observation_space = gym.spaces.Box(0, 255, (4, 36, 36), np.uint8)
        action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)

    builder = get_builder("iql")
    with pytest.raises(ValueError, match="iql reads image observations with continuous actions through no"):
        builder.validate(make_environment_spec(Spaces(), 4), 1)
    Spaces.action_space = gym.spaces.Discrete(3)
    builder.validate(make_environment_spec(Spaces(), 4), 1)  # (discrete: the CNN torso)
