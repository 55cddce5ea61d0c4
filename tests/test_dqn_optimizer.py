"""DQN's settings for the MinAtar paper's DQN: the optimizer (Adam by default, or the paper's
centred RMSProp) and the target (double Q by default, or the paper's ``max_a' Q(s', a'; target)``)."""

from __future__ import annotations

import dataclasses
import json
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from shoal.agents.dqn.config import DQNConfig
from shoal.agents.dqn.learning import TrainingState, double_q_td, make_optimizer, make_update, max_q_bootstrap
from shoal.learners.updates import AXIS_NAME


def batch_of_columns(batch: dict) -> dict:
    """``batch`` laid out ``[batch, k=1, ...]``, as ``make_update``'s scan of SGD steps reads it."""
    return {key: value[:, None] for key, value in batch.items()}


def centred_rmsprop_by_hand(grads: list[np.ndarray], lr: float) -> np.ndarray:
    """PyTorch's ``RMSprop(alpha=0.95, eps=0.01, centered=True)`` (its documented algorithm),
    the parameter's total change after ``grads``."""
    square_avg = grad_avg = change = np.zeros_like(grads[0])
    for g in grads:
        square_avg = 0.95 * square_avg + 0.05 * g * g
        grad_avg = 0.95 * grad_avg + 0.05 * g
        change = change - lr * g / (np.sqrt(square_avg - grad_avg**2) + 0.01)
    return change


def test_rmsprop_is_the_minatar_papers_centred_rmsprop():
    config = dataclasses.replace(DQNConfig(), optimizer="rmsprop", learning_rate=2.5e-4, max_gradient_norm=1e9)
    optimizer = make_optimizer(config)
    params = jnp.zeros(3)
    state = optimizer.init(params)
    grads = [np.array([0.5, -2.0, 0.01], np.float32), np.array([0.4, 1.0, 0.02], np.float32)] * 3
    total = jnp.zeros(3)
    for g in grads:
        updates, state = optimizer.update(jnp.asarray(g), state, params)
        total = total + updates
    np.testing.assert_allclose(total, centred_rmsprop_by_hand(grads, 2.5e-4), rtol=1e-4)
    # ... and not Adam's step (whose first step is lr * sign(g) whatever the gradient's size)
    adam = make_optimizer(dataclasses.replace(config, optimizer="adam"))
    first, _ = adam.update(jnp.asarray(grads[0]), adam.init(params), params)
    assert not np.allclose(first, centred_rmsprop_by_hand(grads[:1], 2.5e-4), rtol=1e-2)


def test_an_unknown_optimizer_is_one_line_before_anything_starts(tmp_path, capsys, monkeypatch):
    from shoal.launch.experiments.cli.main import main

    monkeypatch.chdir(tmp_path)
    run_dir = tmp_path / "run"
    args = ["train", "--agent", "dqn", "--env", "CartPole-v1", "--set", "optimizer=sgd", "--run-dir", str(run_dir)]
    assert main(args) == 2
    captured = capsys.readouterr()
    errors = captured.err.strip().splitlines()
    assert errors == ["shoal: error: optimizer must be one of adam, rmsprop, got 'sgd'"], errors
    assert captured.out == "" and not run_dir.exists()


def test_a_name_make_optimizer_does_not_know_is_refused_not_taken_for_adam():
    with pytest.raises(ValueError, match="optimizer must be one of adam, rmsprop, got 'RMSprop'"):
        make_optimizer(dataclasses.replace(DQNConfig(), optimizer="RMSprop"))


def test_continuous_cql_refuses_an_optimizer_it_would_not_use():
    from shoal.agents import get_builder
    from shoal.core.specs import make_environment_spec
    from shoal.envs import make_vector_env

    env = make_vector_env("Pendulum-v1", 1, seed=0)
    spec = make_environment_spec(env)
    env.close()
    get_builder("cql").validate(spec, 1)
    with pytest.raises(
        ValueError, match="optimizer=rmsprop applies to discrete cql .*continuous cql trains with SAC's Adam"
    ):
        get_builder("cql", optimizer="rmsprop").validate(spec, 1)
    with pytest.raises(ValueError, match="double_q=False applies to discrete cql"):
        get_builder("cql", double_q=False).validate(spec, 1)


def test_max_q_bootstrap_maximises_the_target_net_over_the_allowed_next_actions():
    q_target = jnp.array([[10.0, 20.0, 30.0], [40.0, 50.0, 60.0]])
    assert max_q_bootstrap(q_target, None).tolist() == [30.0, 60.0]
    mask = jnp.array([[True, True, False], [False, True, False]])
    assert max_q_bootstrap(q_target, mask).tolist() == [20.0, 50.0]
    nothing_allowed = jnp.zeros((2, 3), bool)  # (a Q value, as double Q reads, not the mask's -1e9)
    assert max_q_bootstrap(q_target, nothing_allowed).tolist() == [10.0, 40.0]


def test_double_q_false_bootstraps_from_the_target_nets_max_and_the_builder_passes_it_on():
    from shoal.agents import get_builder
    from shoal.agents.components.flax_apply import apply_network
    from shoal.core.specs import make_environment_spec
    from shoal.envs import make_vector_env

    env = make_vector_env("CartPole-v1", 1, seed=0)
    spec = make_environment_spec(env)
    env.close()
    builders = {double_q: get_builder("dqn", double_q=double_q) for double_q in (True, False)}
    network = builders[True].make_networks(spec).q_network
    params, target_params = (network.init(jax.random.PRNGKey(k), jnp.zeros((1, 4))) for k in (0, 1))
    rng = np.random.default_rng(0)
    batch = {
        "observation": jnp.asarray(rng.normal(size=(64, 4)), jnp.float32),
        "next_observation": jnp.asarray(rng.normal(size=(64, 4)), jnp.float32),
        "action": jnp.asarray(rng.integers(0, 2, 64), jnp.int32),
        "reward": jnp.asarray(rng.normal(size=64), jnp.float32),
        "discount": jnp.full(64, 0.99, jnp.float32),
    }
    q_online_next = apply_network(network, params, batch["next_observation"])
    q_target_next = apply_network(network, target_params, batch["next_observation"])
    q_taken = apply_network(network, params, batch["observation"])[np.arange(64), batch["action"]]
    by_hand = {
        False: q_taken - (batch["reward"] + 0.99 * q_target_next.max(axis=-1)),
        True: q_taken - (batch["reward"] + 0.99 * q_target_next[np.arange(64), q_online_next.argmax(axis=-1)]),
    }
    assert not np.allclose(by_hand[False], by_hand[True])  # (the two targets differ on this batch)
    for double_q, builder in builders.items():
        np.testing.assert_allclose(
            double_q_td(network, params, target_params, batch, double_q)[2], by_hand[double_q], rtol=1e-5, atol=1e-5
        )
        out = builder.loss(network, params, target_params, batch)
        np.testing.assert_allclose(out.td_abs, np.abs(by_hand[double_q]), rtol=1e-5, atol=1e-5)
        # discrete CQL's loss (DQN's TD error plus its conservative term) ...
        cql = get_builder("cql", double_q=double_q).loss(network, params, target_params, batch)
        np.testing.assert_allclose(cql.td_abs, np.abs(by_hand[double_q]), rtol=1e-5, atol=1e-5)
        # ... and make_update's own loss (no loss given): its aux is the first SGD step's |TD|
        config = dataclasses.replace(builder.config, sgd_steps_per_update=1)
        update = jax.vmap(make_update(network, config), axis_name=AXIS_NAME)  # (one device's named axis)
        state = TrainingState(params, target_params, make_optimizer(config).init(params), jnp.zeros((), jnp.int32))
        _, output = update(*jax.tree_util.tree_map(lambda x: x[None], (state, batch_of_columns(batch))))
        np.testing.assert_allclose(output.aux[0, :, 0], np.abs(by_hand[double_q]), rtol=1e-5, atol=1e-5)


def test_a_run_resumed_with_another_optimizer_is_refused_naming_it(finished_dqn_run, tmp_path):
    from shoal.agents import get_builder
    from shoal.launch import run_experiment
    from shoal.launch.experiments.run_directory.claim import load_run

    run_dir = tmp_path / "run"
    shutil.copytree(finished_dqn_run, run_dir, symlinks=True)  # (the session's checkpointed run: conftest.py)
    config = load_run(str(run_dir))[0].replace(max_env_steps=800)
    saved = (run_dir / "checkpoints" / "run.json").read_text()
    changed = dataclasses.replace(config, builder=get_builder("dqn", min_replay_size=100, optimizer="rmsprop"))
    config_json = run_dir / "config.json"
    for older in (False, True):
        if older:  # a config.json written before the setting existed: its default is what it had
            record = json.loads(config_json.read_text())
            del record["agent_config"]["optimizer"]
            config_json.write_text(json.dumps(record))
        with pytest.raises(ValueError) as refused:
            run_experiment(changed)
        assert str(refused.value).startswith("a resumed run keeps its agent's settings")
        assert 'optimizer "adam" (config.json) vs "rmsprop" (this config)' in str(refused.value)
        assert (run_dir / "checkpoints" / "run.json").read_text() == saved  # (nothing written)
    assert run_experiment(config)["env_steps"] >= 800
