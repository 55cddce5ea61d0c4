"""Continuous CQL: ``--agent cql`` on a Box action space trains on SAC's loss seam
(``shoal.agents.cql.continuous_learning``). Its conservative term on hand-made numbers, the loss
as SAC's plus that term (which reaches only the critics), the builder's choice by action space;
end to end, trained from the CLI on a small Pendulum dataset Minari's ``DataCollector`` wrote,
resumed, exported, evaluated and loaded as every agent's run.

The end-to-end test needs the ``offline`` extra (minari) and skips without it; the others do not.
"""

from __future__ import annotations

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from shoal.agents.cql.continuous_learning import conservative_term
from shoal.launch.experiments.cli.main import main
from tests.minari_datasets import collect

# --- the conservative term, on hand-made numbers


def test_the_conservative_term_is_larger_when_the_datas_action_has_lower_q_than_the_sampled_ones():
    q_sampled = jnp.array([[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]])
    log_density = jnp.zeros((2, 3))  # (equal weights: a plain logsumexp)
    q_data = jnp.array([0.0, 3.0])  # state 0: the data's action below every sampled one; state 1: the best
    term = np.asarray(conservative_term(q_sampled, log_density, q_data))
    soft_max = np.log(np.exp(1.0) + np.exp(2.0) + np.exp(3.0))
    assert np.allclose(term, [soft_max - 0.0, soft_max - 3.0], rtol=1e-6) and term[0] > term[1] > 0
    # the importance weights: a sample of density 1/2 counts twice (log 2 added to its Q)
    halved = conservative_term(q_sampled[:1], jnp.log(jnp.array([[0.5, 1.0, 1.0]])), q_data[:1])
    assert np.isclose(halved, np.log(2 * np.exp(1.0) + np.exp(2.0) + np.exp(3.0)), rtol=1e-6)
    # its gradient: down on the sampled actions (softmax weights, the largest most), up on the data's
    grads = jax.grad(lambda q, d: conservative_term(q, log_density[:1], d).sum(), argnums=(0, 1))(
        q_sampled[:1], q_data[:1]
    )
    assert np.allclose(grads[0], jax.nn.softmax(q_sampled[:1]), rtol=1e-6) and np.allclose(grads[1], -1.0)


def _pendulum():
    from shoal.agents import get_builder
    from shoal.launch.experiments.config import experiment_config

    spec = experiment_config("cql", "Pendulum-v1", run_dir=None).environment_spec()
    return get_builder("cql", hidden_sizes=(8,), num_sampled_actions=4), spec


def test_the_loss_is_sacs_plus_alpha_times_the_term_which_reaches_only_the_critics():
    import dataclasses

    from shoal.agents.cql.continuous_learning import cql_sac_loss
    from shoal.agents.sac.learning import sac_loss
    from shoal.learners.updates import AXIS_NAME

    builder, spec = _pendulum()
    networks = builder.make_networks(spec)
    state = builder.init_state(jax.random.PRNGKey(0), networks)
    rng = np.random.default_rng(0)
    observation = rng.normal(size=(1, 8, 3)).astype(np.float32)  # [device, batch, ...]
    batch = {
        "observation": observation,
        "action": rng.uniform(-2, 2, size=(1, 8, 1)).astype(np.float32),
        "reward": np.ones((1, 8), np.float32),
        "discount": np.full((1, 8), 0.99, np.float32),
        "next_observation": observation + 0.1,
    }
    trained = {"policy": state.params, "critic": state.critic_params, "log_alpha": state.log_alpha}
    one = lambda x: x[None]  # noqa: E731  (a leading device axis)
    params, target, key = jax.tree_util.tree_map(one, (trained, state.target_critic_params, jax.random.PRNGKey(1)))

    def losses(params, target, batch, key):
        config = dataclasses.replace(builder.config, alpha=2.0)
        sac, _ = sac_loss(networks, params, target, batch, key, config)
        cql, metrics = cql_sac_loss(networks, params, target, batch, key, config)
        term = jax.grad(lambda p: cql_sac_loss(networks, p, target, batch, key, config)[1]["conservative"])
        return sac, cql, metrics["conservative"], term(params)

    sac, cql, conservative, grads = jax.pmap(losses, axis_name=AXIS_NAME)(params, target, batch, key)
    assert np.isclose(cql, sac + 2.0 * conservative, rtol=1e-5) and np.isfinite(conservative).all()
    for name, tree in grads.items():  # (the term's gradient: the critics' only)
        largest = max(float(jnp.abs(g).max()) for g in jax.tree_util.tree_leaves(tree))
        assert (largest > 0) == (name == "critic"), (name, largest)


def test_cql_picks_dqns_or_sacs_learner_by_the_action_space_and_refuses_what_sac_cannot_act_in():
    import dataclasses

    import gymnasium as gym

    from shoal.agents import get_builder
    from shoal.agents.dqn.networks import DQNNetworks
    from shoal.agents.sac.networks import SACNetworks
    from shoal.launch.experiments.config import experiment_config

    builder, spec = _pendulum()
    builder.validate(spec, 1)
    assert isinstance(builder.make_networks(spec), SACNetworks)
    cartpole = experiment_config("cql", "CartPole-v1", run_dir=None).environment_spec()
    builder.validate(cartpole, 1)
    assert isinstance(builder.make_networks(cartpole), DQNNetworks)
    # alpha: None picks its default by the kind of action; a value is used for both
    weight = builder.config.conservative_weight
    assert builder.config.alpha is None and weight(discrete=True) == 0.5 and weight(discrete=False) == 5.0
    assert get_builder("cql", alpha=2.0).config.conservative_weight(False) == 2.0
    with pytest.raises(ValueError, match=r"^prioritized_replay applies to discrete cql"):
        get_builder("cql", prioritized_replay=True).validate(spec, 1)
    with pytest.raises(ValueError, match=r"^SAC squashes actions into the action space's bounds"):
        builder.validate(dataclasses.replace(spec, action_space=gym.spaces.Box(-np.inf, np.inf, (1,))), 1)


def test_continuous_cql_without_a_dataset_is_one_line_and_nothing_is_written(tmp_path, capsys):
    run = str(tmp_path / "run")
    assert main(["train", "--agent", "cql", "--env", "Pendulum-v1", "--run-dir", run, "--quiet"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == ["shoal: error: agent 'cql' trains offline, from a dataset: give --dataset PATH (a Minari dataset)"]
    assert not os.path.exists(run)


# --- end to end, from the CLI (e2e: it trains for some seconds)


def _train(capsys, *argv: str) -> dict:
    assert main(["train", *argv, "--quiet"]) == 0, capsys.readouterr().err[-3000:]
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


@pytest.mark.e2e
def test_continuous_cql_trains_on_a_pendulum_dataset_resumes_exports_evaluates_and_loads(tmp_path, capsys):
    """Pendulum's actions from a proportional controller of the pole's angle (minari's
    DataCollector); the greedy action is SAC's squashed mean, inside the Box."""

    def controller(observation, rng, space):
        return np.clip(-2.0 * observation[1:2] - 0.5 * observation[2:3], -2.0, 2.0).astype(np.float32)

    dataset = collect(str(tmp_path / "minari"), "Pendulum-v1", "pendulum-controller-v0", 5, controller)
    run = str(tmp_path / "run")
    flags = ["--max-env-steps", "300", "--eval-every", "300", "--eval-episodes", "1", "--target-return", "0"]
    result = _train(capsys, "--agent", "cql", "--env", "Pendulum-v1", "--dataset", dataset, "--run-dir", run, *flags)
    assert result["agent"] == "cql" and result["offline"] is True and result["env_steps"] == 0
    assert result["dataset"]["steps"] == 1000 and result["learner_steps"] == 300
    assert result["dataset"]["transitions"] == 16 * (1000 // 16 - 2)  # (3-step windows: 2 lost per lane)
    import csv

    with open(os.path.join(run, "learner.csv")) as f:
        last = list(csv.DictReader(f))[-1]
    assert all(np.isfinite(float(last[k])) for k in ("critic_loss", "policy_loss", "conservative", "alpha"))
    # resumed from its checkpoint (replay, SAC's state), no dataset read
    resumed = _train(capsys, "--resume", run, "--max-env-steps", "400")
    assert resumed["learner_steps"] == 400 and "dataset" not in resumed
    # exported, evaluated and loaded as every agent's run: the squashed mean, inside the Box
    out = str(tmp_path / "policy.jax")
    assert main(["export", run, "--out", out]) == 0, capsys.readouterr().err[-2000:]
    exported = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert exported["agent"] == "cql" and exported["checkpoint"] == 400
    assert main(["evaluate", run, "--episodes", "1", "--seed", "0"]) == 0, capsys.readouterr().err[-2000:]
    evaluated = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert evaluated["agent"] == "cql" and evaluated["checkpoint"] == 400
    import minari
    from jax import export

    from shoal import load_policy

    episode = minari.MinariDataset(os.path.join(dataset, "data")).sample_episodes(1)[0]
    observations = episode.observations[:-1].astype(np.float32)
    acted = np.asarray(load_policy(run)(observations))
    assert acted.shape == episode.actions.shape and np.abs(acted).max() <= 2.0
    with open(out, "rb") as f:
        artifact = export.deserialize(bytearray(f.read()))
    assert np.allclose(np.asarray(artifact.call(observations)), acted, atol=1e-5)
