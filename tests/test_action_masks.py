"""Action masks: masked policies never choose a masked action (random masks, every discrete
agent, acting and evaluating), log-probabilities and entropy over the allowed set, DQN's masked
target, the one-line errors, and Taxi-v4 with masks trained end to end."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.agents import get_builder
from shoal.agents.components import distributions
from shoal.agents.components.dict_observations import mask_logits
from shoal.agents.dqn.learning import double_q_bootstrap
from shoal.core.specs import ArraySpec, EnvironmentSpec, make_environment_spec
from shoal.core.types import ActorInfo
from shoal.envs import make_vector_env
from shoal.launch import ExperimentConfig, run_experiment
from shoal.launch.experiments.run_directory.config_record import flat_record

NUM_ACTIONS, BATCH = 6, 8
SPEC = EnvironmentSpec(
    None,
    None,
    {"observation": ArraySpec((5,), np.float32), "action_mask": ArraySpec((NUM_ACTIONS,), np.int8)},
    ArraySpec((), np.int32),
    NUM_ACTIONS,
    BATCH,
)


def _policies():
    """(name, jitted apply, params) of every discrete agent's acting and evaluation policies."""
    out = []
    for agent, settings_ in [("dqn", {"epsilon_start": 1.0, "epsilon_end": 0.5}), ("ppo", {}), ("impala", {})]:
        builder = get_builder(agent, **settings_)
        networks = builder.make_networks(SPEC)
        params = builder.make_learner(jax.random.PRNGKey(0), networks, iter([])).get_variables()[1]
        for evaluation in (False, True):
            policy = builder.make_policy(networks, SPEC, evaluation)
            out.append((f"{agent}-{'eval' if evaluation else 'act'}", jax.jit(policy.apply), params))
    return out


POLICIES = _policies()


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1), bits=st.lists(st.integers(1, 2**NUM_ACTIONS - 1), min_size=BATCH, max_size=BATCH)
)
def test_masked_policies_never_choose_a_masked_action(seed, bits):
    mask = np.array([[(b >> i) & 1 for i in range(NUM_ACTIONS)] for b in bits], np.int8)  # >= 1 allowed each
    rng = np.random.default_rng(seed)
    observation = {"observation": rng.normal(size=(BATCH, 5)).astype(np.float32) * 10, "action_mask": mask}
    for name, apply, params in POLICIES:
        actions, extras, _ = apply(params, jax.random.PRNGKey(seed), observation, ActorInfo(0, 0))
        assert mask[np.arange(BATCH), np.asarray(actions)].all(), (name, mask, actions)
        if "logits" in extras:  # IMPALA records the masked (behaviour) logits
            assert (np.asarray(extras["logits"])[mask == 0] <= -1e8).all()


def test_masked_log_prob_and_entropy_are_over_the_allowed_actions():
    logits = jnp.array([[1.0, 2.0, 0.5, -1.0]])
    mask = jnp.array([[True, False, True, True]])
    allowed = jnp.array([1.0, 0.5, -1.0])
    masked = mask_logits(logits, mask)
    expected_log_probs = jax.nn.log_softmax(allowed)
    assert np.allclose(distributions.categorical_log_prob(masked, jnp.array([2])), expected_log_probs[1])
    expected_entropy = -jnp.sum(jnp.exp(expected_log_probs) * expected_log_probs)
    assert np.allclose(distributions.categorical_entropy(masked), expected_entropy)
    grads = jax.grad(lambda x: distributions.categorical_entropy(mask_logits(x, mask)).sum())(logits)
    assert np.isfinite(grads).all() and grads[0, 1] == 0  # (no gradient through a masked logit)


def test_dqn_targets_maximise_over_the_allowed_next_actions():
    q_online = jnp.array([[5.0, 1.0, 2.0], [0.0, 3.0, 1.0]])
    q_target = jnp.array([[10.0, 20.0, 30.0], [40.0, 50.0, 60.0]])
    assert double_q_bootstrap(q_online, q_target, None).tolist() == [10.0, 50.0]
    mask = jnp.array([[False, True, True], [True, False, True]])
    assert double_q_bootstrap(q_online, q_target, mask).tolist() == [30.0, 60.0]


def test_taxi_gives_its_info_mask_in_the_observation_and_the_flag_drops_it():
    env = make_vector_env("Taxi-v4", 2, 0)
    spec = make_environment_spec(env)
    obs, info = env.reset(seed=0)
    env.close()
    assert spec.observation["observation"] == ArraySpec((500,), np.float32)  # Discrete(500), one-hot
    assert (obs["action_mask"] == info["action_mask"]).all() and obs["observation"].sum(axis=1).tolist() == [1, 1]
    env = make_vector_env("Taxi-v4", 2, 0, action_masks=False)
    assert make_environment_spec(env).observation == ArraySpec((500,), np.float32)
    env.close()


def test_the_cli_turns_masks_off_and_records_it():
    import contextlib
    import io
    import json

    from shoal.launch.experiments.cli.main import main

    for flags, masks in ((["--no-action-masks"], False), ([], True)):
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            rc = main(["train", "--agent", "ppo", "--env", "Taxi-v4", "--dry-run", *flags])
        assert rc == 0 and flat_record(json.loads(out.getvalue().splitlines()[0]))["action_masks"] is masks


@pytest.mark.parametrize(
    "mask, message",
    [
        ((1, 1, 1), r"info\['action_mask'\] has shape \(3,\); it must have one entry per action, \(2,\)"),
    ],
)
def test_a_mask_of_the_wrong_shape_is_one_line_before_anything_runs(mask, message):
    config = ExperimentConfig.from_flat(
        builder=get_builder("dqn"),
        env_id="masked",
        env_factory="tests.user_envs:cartpole_with_mask",
        env_args={"mask": mask},
        num_envs=2,
    )
    with pytest.raises(ValueError, match=message):
        config.environment_spec()


def test_a_state_with_no_allowed_action_stops_the_run_in_one_line():
    config = ExperimentConfig.from_flat(
        builder=get_builder("dqn"),
        env_id="masked",
        env_factory="tests.user_envs:cartpole_with_mask",
        env_args={"mask": (0, 0)},
        num_envs=2,
        max_env_steps=2_000,
        progress=False,
        target_return=1e9,
    )
    with pytest.raises(
        RuntimeError, match=r"the environment's action_mask allows no action at step 0 \(envs \[0, 1\]\)"
    ):
        run_experiment(config)


def test_a_mask_of_continuous_actions_has_an_entry_per_action_entry_else_it_is_one_line():
    import gymnasium as gym

    def spec(mask_size: int):
        class Spaces:
            observation_space = gym.spaces.Dict(
                {"x": gym.spaces.Box(-1, 1, (2,)), "action_mask": gym.spaces.MultiBinary(mask_size)}
            )
            action_space = gym.spaces.Box(-1, 1, (2,))

        return make_environment_spec(Spaces())

    assert spec(2).action_mask.shape == (2,)  # (the entries in use)
    with pytest.raises(
        ValueError, match=r"action_mask has shape \(3,\), but the actions are continuous of shape \(2,\)"
    ):
        spec(3)


@pytest.mark.e2e
@pytest.mark.parametrize("agent", ["dqn", "ppo", "impala"])
def test_taxi_with_masks_trains_in_one_process_and_never_takes_a_masked_action(agent):
    """The env raises on a masked action (``tests.user_envs.strict_taxi``), in training and in evaluation."""
    settings_ = {"dqn": {"min_replay_size": 200}, "ppo": {}, "impala": {}}[agent]
    config = ExperimentConfig.from_flat(
        builder=get_builder(agent, **settings_),
        env_id="strict-taxi",
        env_factory="tests.user_envs:strict_taxi",
        num_envs=4,
        max_env_steps=2_000,
        eval_every=1_000,
        eval_episodes=4,
        target_return=1e9,
        progress=False,
    )
    result = run_experiment(config)
    assert result["env_steps"] >= 2_000 and result["num_evals"] == 2 and result["final_eval_return"] >= -200


@pytest.mark.e2e
@pytest.mark.slow  # (CI time: tests/test_dict_observations.py trains masks under processes too)
def test_taxi_with_masks_trains_under_processes(tmp_path):
    """Two actor processes and the evaluator's make their envs with the strict factory."""
    from shoal.launch import run_distributed_experiment

    config = ExperimentConfig.from_flat(
        builder=get_builder("ppo"),
        env_id="strict-taxi",
        env_factory="tests.user_envs:strict_taxi",
        num_envs=4,
        max_env_steps=4_000,
        eval_every=4_000,
        eval_episodes=4,
        target_return=1e9,
        run_dir=str(tmp_path / "run"),
        progress=False,
    )
    result = run_distributed_experiment(config, num_actors=2, launcher="processes")
    assert result["env_steps"] >= 4_000 and result["learner_steps"] > 0 and result["final_eval_return"] >= -200
