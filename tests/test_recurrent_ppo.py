"""Recurrent PPO: the learner unrolls each env sequence from the state the actor recorded at its
first step, resets it exactly where an episode began, and so sees what the actor saw; its
minibatches are whole sequences."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from shoal.actors import BatchedActor, VariableClient
from shoal.agents.components import recurrent as core
from shoal.agents.ppo import PPOBuilder, PPOConfig, learning, recurrent
from shoal.core.interfaces import VariableSource
from shoal.core.specs import make_environment_spec
from shoal.core.types import Step
from shoal.envs import make_vector_env
from shoal.learners.updates import sequence_minibatch_epochs

NUM_ENVS = 3


class FixedParams(VariableSource):
    def __init__(self, params):
        self.params = params

    def get_variables(self, known_version: int = -1):
        return (0, None) if known_version == 0 else (0, self.params)


def rollout(config: PPOConfig, length: int):
    """A rollout of a recurrent PPO actor on the velocity-free CartPole, as replay stores it
    ``[envs, T, ...]``, and the networks and training state it acted with."""
    env = make_vector_env("shoal/CartPoleNoVelocity-v1", NUM_ENVS, 0)
    spec = make_environment_spec(env)
    builder = PPOBuilder(config)
    networks = builder.make_networks(spec)
    state = learning.init_state(jax.random.PRNGKey(0), networks, config)
    actor = BatchedActor(
        builder.make_policy(networks, spec, False),
        jax.random.PRNGKey(1),
        VariableClient(FixedParams(state.params), asynchronous=False),
        num_envs=NUM_ENVS,
    )
    observation, _ = env.reset(seed=0)
    steps = []
    for _ in range(length):
        action, extras = actor.select_action(observation)
        next_observation, reward, terminated, truncated, _ = env.step(action)
        step = Step(observation, action, reward, terminated, truncated, next_observation, extras)
        actor.observe(step)
        steps.append(step)
        observation = next_observation
    stack = lambda xs: np.stack(xs, axis=1)  # noqa: E731  [envs, T, ...]
    batch = {
        "observation": stack([s.observation for s in steps]),
        "action": stack([s.action for s in steps]),
        "terminated": stack([s.terminated for s in steps]),
        "truncated": stack([s.truncated for s in steps]),
        "extras": {key: stack([s.extras[key] for s in steps]) for key in steps[0].extras},
    }
    return batch, networks, state


def test_the_learner_unroll_sees_what_the_actor_saw():
    batch, networks, state = rollout(PPOConfig(lstm_size=8), 60)
    assert batch["terminated"].sum() >= 3  # episodes end inside the sequences
    inputs = recurrent.sequence_inputs(batch)
    # the stored state of a sequence is the actor's at its first step: zeros, a fresh episode
    np.testing.assert_array_equal(inputs["initial_state"], np.zeros((NUM_ENVS, 16)))
    params = state.params["network"]
    outputs, states = core.unroll(
        networks.network, params, inputs["initial_state"], jnp.asarray(batch["observation"]), inputs["first"]
    )
    # within an episode, the state after step t is the one the actor recorded at step t + 1
    within = ~(batch["terminated"] | batch["truncated"])[:, :-1]
    recorded = batch["extras"][core.STATE_KEY]
    np.testing.assert_allclose(np.asarray(states)[:, :-1][within], recorded[:, 1:][within], atol=1e-5)
    # ... and where one began, the actor acted from a fresh state, as the unroll does
    assert np.all(recorded[:, 1:][~within] == 0)
    policy_out, _ = recurrent.forward(networks.network, params, {**inputs, "observation": batch["observation"]})
    log_prob = learning.head(networks).log_prob(policy_out, jnp.asarray(batch["action"]))
    np.testing.assert_allclose(log_prob, batch["extras"]["log_prob"], atol=1e-5)


def test_episode_starts_follow_the_previous_steps_end():
    terminated = np.array([[0, 1, 0, 0, 0], [0, 0, 0, 0, 1]], bool)
    truncated = np.array([[0, 0, 0, 1, 0], [1, 0, 0, 0, 0]], bool)
    first = core.episode_starts(jnp.asarray(terminated), jnp.asarray(truncated))
    np.testing.assert_array_equal(first, [[0, 0, 1, 0, 1], [0, 1, 0, 0, 0]])


def test_the_unroll_resets_to_zeros_where_an_episode_began():
    network = core.RecurrentActorCritic((8,), 4, num_actions=2)
    params = core.init_params(network, jax.random.PRNGKey(0), (3,))
    observation = jax.random.normal(jax.random.PRNGKey(1), (1, 7, 3))
    start = jax.random.normal(jax.random.PRNGKey(2), (1, 8))
    first = jnp.zeros((1, 7), bool).at[0, 4].set(True)
    outputs, _ = core.unroll(network, params, start, observation, first)
    before, _ = core.unroll(network, params, start, observation[:, :4], first[:, :4])
    after, _ = core.unroll(network, params, jnp.zeros((1, 8)), observation[:, 4:], jnp.zeros((1, 3), bool))
    np.testing.assert_allclose(outputs, jnp.concatenate([before, after], axis=1), atol=1e-6)
    assert not np.allclose(outputs[:, 4:], core.unroll(network, params, start, observation, first * False)[0][:, 4:])


def test_minibatches_are_whole_sequences_that_split_the_rows_each_epoch():
    rows, length, num_minibatches, num_epochs = 8, 5, 4, 3
    data = {"row": jnp.repeat(jnp.arange(rows)[:, None], length, axis=1), "t": jnp.tile(jnp.arange(length), (rows, 1))}

    def sgd_step(state, minibatch):  # records each minibatch's rows, and whether their steps are whole, in order
        count, record = state
        whole = jnp.all(minibatch["t"] == jnp.arange(length)) & jnp.all(minibatch["row"] == minibatch["row"][:, :1])
        return (count + 1, record.at[count].set(minibatch["row"][:, 0])), {"whole": whole.astype(jnp.float32)}, None

    def run(data):  # (one device: the update's axis, as the learner maps it)
        start = (0, jnp.zeros((num_epochs * num_minibatches, rows // num_minibatches), jnp.int32))
        return sequence_minibatch_epochs(
            sgd_step, start, data, jax.random.PRNGKey(0), num_epochs=num_epochs, num_minibatches=num_minibatches
        )

    batched = jax.tree_util.tree_map(lambda x: x[None], data)
    ((_, record), out) = jax.vmap(run, axis_name="devices")(batched)
    assert float(out.metrics["whole"][0]) == 1.0 and out.sgd_steps == num_epochs * num_minibatches
    chosen = np.asarray(record[0]).reshape(num_epochs, num_minibatches, -1)
    for epoch in chosen:
        assert sorted(epoch.ravel().tolist()) == list(range(rows))  # a partition of the rows
    assert len({tuple(epoch.ravel()) for epoch in chosen}) > 1  # a new order each epoch


@pytest.mark.parametrize("num_envs, num_minibatches", [(6, 4), (8, 3)])
def test_minibatches_must_divide_the_sequences(num_envs, num_minibatches):
    env = make_vector_env("shoal/CartPoleNoVelocity-v1", num_envs, 0)
    builder = PPOBuilder(PPOConfig(lstm_size=8, num_minibatches=num_minibatches))
    with pytest.raises(ValueError, match=f"num_minibatches={num_minibatches} must divide the {num_envs} env sequences"):
        builder.validate(make_environment_spec(env), 1)


@pytest.mark.e2e
def test_recurrent_ppo_learns_to_balance_without_velocities_and_resumes(tmp_path):
    """The preset a velocity-free CartPole gets (``ppo/memory``) learns what one frame cannot
    tell (feed-forward PPO stays near 35, tests/test_memory_tasks.py); a checkpointed run
    resumes with its learner's state and goes on learning."""
    pytest.importorskip("reverb")
    import json

    from shoal.agents import get_builder
    from shoal.agents.presets import find_preset
    from shoal.launch import ExperimentConfig, run_experiment

    env_id = "shoal/CartPoleNoVelocity-v1"
    preset = find_preset("ppo", env_id)
    assert preset.name == "ppo/memory"
    builder = get_builder("ppo", **{**preset.settings, "schedule_env_steps": 100_000})
    config = ExperimentConfig.from_flat(
        builder=builder,
        env_id=env_id,
        num_envs=8,
        seed=2,
        max_env_steps=4_000,
        eval_every=2_000,
        eval_episodes=4,
        target_return=1e9,
        run_dir=str(tmp_path / "run"),
        progress=False,
    )
    first = run_experiment(config)
    saved = json.loads((tmp_path / "run" / "checkpoints" / "run.json").read_text())
    second = run_experiment(config.replace(max_env_steps=8_000, resume=True))
    assert second["resumed_from"]["learner_digest"] == saved["learner_digest"]
    assert first["learner_steps"] < second["learner_steps"]
    with open(tmp_path / "run" / "eval.csv") as f:
        evals = [float(line.split(",")[1]) for line in f.readlines()[1:]]
    # (seed 2 on the pinned 3.11 stack: 28.5, 84.75, 138.0, 149.75 -- rising at each evaluation;
    # 120 is over three times what feed-forward PPO holds on this task, with room for the
    # numerics of another XLA build)
    assert max(evals) > 120 and evals[-1] > 2 * evals[0], evals
