"""R2D2: n-step double-Q targets and sequence priorities by hand, burn-in steps without loss, env
sequences in a real Reverb table with the actor's state at their first step, per-episode
exploration rates, and a run that learns and resumes with its replay."""

import json

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tree

from shoal.actors import BatchedActor, VariableClient
from shoal.agents.components.recurrent import STATE_KEY
from shoal.agents.r2d2 import R2D2Builder, R2D2Config, learning
from shoal.core.interfaces import VariableSource
from shoal.core.specs import make_environment_spec
from shoal.core.types import Step
from shoal.envs import make_vector_env
from shoal.envs.environments import final_observations

ENV = "shoal/CartPoleNoVelocity-v1"


class FixedParams(VariableSource):
    def __init__(self, params):
        self.params = params

    def get_variables(self, known_version: int = -1):
        return (0, None) if known_version == 0 else (0, self.params)


def test_n_step_targets_by_hand():
    gamma, n = 0.5, 3
    reward = jnp.array([[1.0, 2.0, 4.0, 8.0, 16.0]])
    bootstrap = jnp.array([[10.0, 20.0, 30.0, 40.0, 50.0]])  # the value of each step's next observation
    terminated = jnp.array([[0, 1, 0, 0, 0]], bool)  # the episode terminates at step 1 ...
    truncated = jnp.array([[0, 0, 0, 1, 0]], bool)  # ... the next one is truncated at step 3
    targets = learning.n_step_targets(reward, terminated, truncated, bootstrap, gamma, n)
    expected = [
        1 + 0.5 * 2,  # steps 0-1, then the termination: no bootstrap
        2,  # step 1 terminates
        4 + 0.5 * 8 + 0.25 * 40,  # steps 2-3, truncated: bootstrap from step 3's final observation
        8 + 0.5 * 40,  # step 3 alone
        16 + 0.5 * 50,
    ]  # the sequence's last step: one reward, then its next observation
    np.testing.assert_allclose(targets, [expected])


def test_sequence_priority_by_hand():
    td = jnp.array([[1.0, 3.0, 2.0], [0.0, 0.0, 6.0]])
    np.testing.assert_allclose(learning.sequence_priorities(td, 0.9), [0.9 * 3 + 0.1 * 2, 0.9 * 6 + 0.1 * 2], rtol=1e-6)


def batch_and_update(config: R2D2Config, seed: int = 0):
    env = make_vector_env(ENV, 2, 0)
    spec = make_environment_spec(env)
    builder = R2D2Builder(config)
    networks = builder.make_networks(spec)
    state = learning.init_state(jax.random.PRNGKey(0), networks, config)
    example = builder.example_batch(spec).data
    rng = np.random.default_rng(seed)
    batch = {
        **example,
        "observation": rng.normal(size=example["observation"].shape).astype(np.float32),
        "next_observation": rng.normal(size=example["observation"].shape).astype(np.float32),
        "reward": rng.normal(size=example["reward"].shape).astype(np.float32),
        "action": rng.integers(0, 2, example["action"].shape).astype(np.int32),
        "probability": rng.uniform(0.01, 0.1, example["probability"].shape).astype(np.float32),
    }
    update = jax.jit(jax.vmap(learning.make_update(networks, config), in_axes=(None, 0), axis_name="devices"))
    return state, batch, lambda b: update(state, jax.tree_util.tree_map(lambda x: x[None], b))


def test_burn_in_steps_carry_no_loss():
    config = R2D2Config(burn_in_length=4, trace_length=6, batch_size=3, n_step=2)
    _, batch, update = batch_and_update(config)
    _, out = update(batch)
    changed = dict(batch, reward=batch["reward"].copy(), action=batch["action"].copy())
    changed["reward"][:, :4] += 5.0  # what the burn-in steps did and got ...
    changed["action"][:, :4] = 1 - changed["action"][:, :4]
    _, same = update(changed)
    np.testing.assert_allclose(same.metrics["loss"], out.metrics["loss"], rtol=1e-6)  # ... is in no loss
    np.testing.assert_allclose(same.aux, out.aux, rtol=1e-6)  # ... nor priority
    changed["reward"][:, 4] += 5.0  # a trained step's reward is
    _, different = update(changed)
    assert not np.allclose(different.metrics["loss"], out.metrics["loss"])


def test_env_sequences_hold_the_actors_state_at_their_first_step():
    pytest.importorskip("reverb")
    from shoal.replay import make_replay_server, without_insert_blocking

    config = R2D2Config(burn_in_length=3, trace_length=5, sequence_period=4, lstm_size=8, min_replay_size=1)
    env = make_vector_env(ENV, 2, 0)
    spec = make_environment_spec(env)
    builder = R2D2Builder(config)
    networks = builder.make_networks(spec)
    params = learning.init_state(jax.random.PRNGKey(0), networks, config).params
    server = make_replay_server(without_insert_blocking(builder.make_replay_tables(spec)))  # (nothing samples)
    try:
        adder = builder.make_adder(server.client, spec)
        actor = BatchedActor(
            builder.make_policy(networks, spec, False),
            jax.random.PRNGKey(1),
            VariableClient(FixedParams(params), asynchronous=False),
            adder,
            num_envs=2,
        )
        observation, _ = env.reset(seed=0)
        recorded = []
        for _ in range(40):
            action, extras = actor.select_action(observation)
            next_observation, reward, terminated, truncated, info = env.step(action)
            recorded.append(extras[STATE_KEY])
            actor.observe(
                Step(
                    observation,
                    action,
                    reward,
                    terminated,
                    truncated,
                    final_observations(next_observation, terminated, truncated, info),
                    extras,
                )
            )
            observation = next_observation
        adder.flush()
        table = server.client.server_info()[learning_table()]
        # sequences of 8 steps every 4 vector steps, one item per env: (40 - 8) / 4 + 1 = 9 windows
        assert table.current_size == 9 * 2
        items = [
            tree.unflatten_as(table.signature, sample.data)
            for sample in server.client.sample(learning_table(), num_samples=60, emit_timesteps=False)
        ]
    finally:
        server.stop()
    recorded = np.stack(recorded)  # [vector steps, envs, 2H]
    for item in items:
        states = item["extras"][STATE_KEY]  # [8, 2H]: the state each step was acted from
        matches = [(t, e) for t in range(0, 33, 4) for e in range(2) if np.array_equal(recorded[t : t + 8, e], states)]
        assert len(matches) == 1, "each item is one env's window of 8 steps, starting every 4 steps"
    assert np.abs(recorded).max() > 0  # (a state that moved: the comparison means something)


def learning_table():
    from shoal.agents.r2d2.builder import TABLE

    return TABLE


def test_each_env_draws_an_exploration_rate_per_episode_and_evaluation_uses_its_own():
    config = R2D2Config(lstm_size=4, eval_epsilon=0.05)
    env = make_vector_env(ENV, 4, 0)
    spec = make_environment_spec(env)
    builder = R2D2Builder(config)
    networks = builder.make_networks(spec)
    params = learning.init_state(jax.random.PRNGKey(0), networks, config).params
    choices = learning.epsilons(config)
    assert choices[0] == pytest.approx(0.4) and choices[-1] == pytest.approx(0.4**8)
    observation = np.zeros((4, 2), np.float32)
    for evaluation in (False, True):
        policy = builder.make_policy(networks, spec, evaluation)
        state = policy.initial_state(4)
        _, _, _, state = jax.jit(policy.apply)(params, jax.random.PRNGKey(3), observation, None, state)
        epsilon = np.asarray(state["epsilon"])
        if evaluation:
            np.testing.assert_allclose(epsilon, 0.05)
        else:
            assert all(np.isclose(choices, e).any() for e in epsilon) and len(set(epsilon.tolist())) > 1
            _, _, _, again = jax.jit(policy.apply)(params, jax.random.PRNGKey(4), observation, None, state)
            np.testing.assert_array_equal(again["epsilon"], epsilon)  # kept until the episode ends


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"sequence_period": 40, "burn_in_length": 10, "trace_length": 20}, "sequence_period=40 exceeds"),
        ({"batch_size": 3}, "batch_size=3 must be a multiple"),
    ],
)
def test_bad_settings_are_one_line(changes, message):
    env = make_vector_env(ENV, 2, 0)
    with pytest.raises(ValueError, match=message):
        R2D2Builder(R2D2Config(**changes)).validate(make_environment_spec(env), 2)


def test_continuous_actions_are_refused():
    env = gym.vector.SyncVectorEnv([lambda: gym.make("Pendulum-v1")])
    with pytest.raises(ValueError, match="R2D2 needs a discrete action space"):
        R2D2Builder(R2D2Config()).validate(make_environment_spec(env), 1)


@pytest.mark.e2e
def test_r2d2_learns_and_resumes_with_its_replay(tmp_path):
    pytest.importorskip("reverb")
    from shoal.agents import get_builder
    from shoal.launch import ExperimentConfig, run_experiment

    config = ExperimentConfig.from_flat(
        builder=get_builder("r2d2", min_replay_size=64),
        env_id=ENV,
        num_envs=8,
        seed=0,
        max_env_steps=2_000,
        eval_every=2_000,
        eval_episodes=2,
        target_return=1e9,
        run_dir=str(tmp_path / "run"),
        progress=False,
    )
    first = run_experiment(config)
    saved = json.loads((tmp_path / "run" / "checkpoints" / "run.json").read_text())
    assert first["learner_steps"] > 0
    second = run_experiment(config.replace(max_env_steps=3_000, resume=True))
    restored = second["resumed_from"]
    assert restored["learner_digest"] == saved["learner_digest"]
    assert restored["replay_items"]["sequences"] > 64  # the sequences came back with the run
    assert second["learner_steps"] > first["learner_steps"]
