"""Dict observations: specs, nested signatures through a real Reverb server (uint8 stays uint8),
example batches laid out as datasets yield them, every agent's networks (a torso per key) and
learner update, the memory estimate and checkpoint records; then short training runs."""

import gymnasium as gym
import jax
import numpy as np
import pytest

import tests.dict_env  # noqa: F401 -- registers DictCartPole-v0, DictPendulum-v0
from shoal.actors import EnvironmentLoop
from shoal.agents import get_builder
from shoal.agents.learner_memory import learner_bytes
from shoal.core.specs import ArraySpec, make_environment_spec
from shoal.envs import make_vector_env
from shoal.envs.environments import final_observations
from shoal.launch.experiments.run_directory.checkpoints import spec_record
from shoal.replay import make_replay_server, without_insert_blocking

SETTINGS = {
    "dqn": {"min_replay_size": 16, "batch_size": 8, "sgd_steps_per_update": 2, "hidden_sizes": (16,)},
    "ppo": {
        "rollout_length": 8,
        "num_minibatches": 2,
        "num_epochs": 1,
        "hidden_sizes": (16,),
        "normalize_observations": True,
    },
    "impala": {"rollout_length": 8, "sequences_per_update": 4, "hidden_sizes": (16,)},
    "sac": {
        "min_replay_size": 16,
        "batch_size": 8,
        "sgd_steps_per_update": 2,
        "hidden_sizes": (16,),
        "samples_per_insert": 16.0,
    },
}  # (SAC's default 256 makes 400 env steps ~12k updates)
ENVS = {"dqn": "DictCartPole-v0", "ppo": "DictCartPole-v0", "impala": "DictCartPole-v0", "sac": "DictPendulum-v0"}


def spec_of(env_id, num_envs=2, **env_args):
    env = make_vector_env(env_id, num_envs, 0, env_args=env_args)
    try:
        return make_environment_spec(env)
    finally:
        env.close()


def test_a_dict_spec_keeps_each_keys_dtype_and_shape():
    spec = spec_of("DictCartPole-v0", masked=True)
    assert spec.observation == {
        "action_mask": ArraySpec((2,), np.int8),
        "cart": ArraySpec((2,), np.float32),
        "pixels": ArraySpec((1, 36, 36), np.uint8),
        "pole": ArraySpec((2,), np.float32),
    }
    assert spec.dict_observations and spec.action_mask == ArraySpec((2,), np.int8)
    assert spec.observation_shape["pixels"] == (1, 36, 36)
    record = spec_record(spec)["observation"]
    assert record["pixels"] == [[1, 36, 36], "uint8"] and record["cart"] == [[2], "float32"]


def test_final_observations_of_a_dict_are_the_final_ones_per_key():
    next_obs = {"a": np.zeros((2, 3), np.float32), "b": np.zeros((2, 1, 2, 2), np.uint8)}
    info = {"final_obs": np.array([None, {"a": np.ones(3), "b": np.full((1, 2, 2), 7)}], dtype=object)}
    final = final_observations(next_obs, np.array([False, True]), np.array([False, False]), info)
    assert final["a"].tolist() == [[0, 0, 0], [1, 1, 1]] and final["b"][1].max() == 7 and final["b"].dtype == np.uint8
    assert next_obs["a"].max() == 0  # (a copy)


class _NoPriorities:
    """(A replay client for a learner that writes no priorities.)"""


@pytest.mark.e2e  # (the data path end to end: env, actor, a real replay table, its dataset, the learner's update)
@pytest.mark.parametrize("agent", ["dqn", "ppo", "impala", "sac"])
def test_observations_go_through_reverb_as_dicts_and_the_learner_takes_them(agent):
    builder = get_builder(agent, **SETTINGS[agent])
    env = make_vector_env(ENVS[agent], 2, 0)
    spec = make_environment_spec(env)
    networks = builder.make_networks(spec)
    policy = builder.make_policy(networks, spec, evaluation=False)
    server = make_replay_server(without_insert_blocking(builder.make_replay_tables(spec)))
    try:
        source = builder.make_learner(jax.random.PRNGKey(1), networks, iter([]))  # (acting params only)
        adder = builder.make_adder(server.client, spec)
        actor = builder.make_actor(jax.random.PRNGKey(0), policy, spec, source, adder, asynchronous_updates=False)
        loop = EnvironmentLoop(env, actor)
        for _ in range(24):
            loop.step()
        adder.flush()
        dataset = builder.make_dataset_iterator(server.client, spec)
        example, sample = dataset.example(), next(dataset)  # a real batch from a real table
        dataset.close()
        adder.close()
    finally:
        server.stop()
        env.close()
    learner = builder.make_learner(jax.random.PRNGKey(1), networks, iter([sample]), replay_client=_NoPriorities())
    metrics = learner.step()  # through the agent's update
    learner.close()
    assert all(np.isfinite(v) for v in metrics.values()), metrics
    layout = lambda data: jax.tree_util.tree_map(lambda x: (x.shape, x.dtype), data)  # noqa: E731
    assert layout(builder.example_batch(spec).data) == layout(example.data) == layout(sample.data)
    for name in ("observation", "next_observation"):
        observation = sample.data[name]
        assert isinstance(observation, dict) and set(observation) == set(spec.observation)
        if agent != "sac":
            assert observation["pixels"].dtype == np.uint8 and observation["pixels"].max() == 255  # real frames
            assert observation["cart"].dtype == np.float32


def test_each_key_has_its_torso_and_the_memory_estimate_counts_them():
    spec = spec_of("DictCartPole-v0", masked=True)
    builder = get_builder("dqn", hidden_sizes=(16,))
    networks = builder.make_networks(spec)
    params = builder.make_learner(jax.random.PRNGKey(0), networks, iter([])).get_variables()[1]
    torso = params["params"]["DictTorso_0"]
    assert set(torso) == {"image_0", "vector_0_0", "vector_1_0"}  # pixels (conv), cart and pole (MLPs); no mask
    assert "Conv_0" in torso["image_0"] and torso["vector_0_0"]["kernel"].shape == (2, 16)
    count, _, _ = learner_bytes(builder, networks)
    assert count == sum(x.size for x in jax.tree_util.tree_leaves(params))


def test_ppo_normalizes_only_the_float_vector_keys():
    spec = spec_of("DictCartPole-v0", masked=True)
    builder = get_builder("ppo", normalize_observations=True)
    learner = builder.make_learner(jax.random.PRNGKey(0), builder.make_networks(spec), iter([]))
    assert set(learner.get_variables()[1]["observation"]) == {"cart", "pole"}


def test_nested_dict_observations_are_one_line():
    class Nested(gym.Env):
        observation_space = gym.spaces.Dict({"inner": gym.spaces.Dict({"x": gym.spaces.Box(-1, 1, (2,))})})
        action_space = gym.spaces.Discrete(2)

    with pytest.raises(ValueError, match="key 'inner': is a nested Dict"):
        make_environment_spec(Nested())


@pytest.mark.e2e
@pytest.mark.parametrize(
    "agent, env_id, env_args",
    [
        # (the env raises on a masked action; its image key is left out here: the convolutions'
        # compile time, and uint8 keys are checked through Reverb and every agent's update above)
        ("ppo", "tests.dict_env:DictCartPole-v0", {"masked": True, "max_episode_steps": 50, "pixels": False}),
        ("sac", "tests.dict_env:DictPendulum-v0", {}),
    ],
)
def test_a_dict_observation_env_trains_in_one_process_and_resumes(tmp_path, agent, env_id, env_args):
    from shoal.launch import ExperimentConfig, resume_experiment, run_experiment

    config = ExperimentConfig.from_flat(
        builder=get_builder(agent, **SETTINGS[agent]),
        env_id=env_id,
        env_args=env_args,
        num_envs=2,
        max_env_steps=400,
        eval_every=400,
        eval_episodes=2,
        target_return=1e9,
        run_dir=str(tmp_path / "run"),
        progress=False,
    )
    result = run_experiment(config)
    assert result["env_steps"] >= 400 and result["learner_steps"] > 0 and result["num_evals"] == 1
    # (the checkpoint's dict spec and params; its module:EnvId named again, as a resume asks)
    resumed = resume_experiment(str(tmp_path / "run"), max_env_steps=600, env_id=env_id)
    assert resumed["resumed_from"]["env_steps"] >= 400 and resumed["env_steps"] >= 600


@pytest.mark.e2e
def test_a_dict_observation_env_with_masks_trains_under_processes(tmp_path):
    """Two actor processes and an evaluator process step the masked Dict env (which raises on a
    masked action); the learner's process trains on its dict batches."""
    from shoal.launch import ExperimentConfig, run_distributed_experiment

    config = ExperimentConfig.from_flat(
        builder=get_builder("dqn", **SETTINGS["dqn"]),
        env_id="tests.dict_env:DictCartPole-v0",
        env_args={"masked": True, "max_episode_steps": 50, "pixels": False},
        num_envs=2,
        max_env_steps=600,
        eval_every=600,
        eval_episodes=2,
        target_return=1e9,
        run_dir=str(tmp_path / "run"),
        progress=False,
    )
    result = run_distributed_experiment(config, num_actors=2, launcher="processes")
    assert result["env_steps"] >= 600 and result["learner_steps"] > 0 and 0 < result["final_eval_return"] <= 50


def test_discrete_entries_become_one_hot_and_box_networks_are_as_before():
    from shoal.envs.observations import OneHotObservation

    class Mixed(gym.Env):
        observation_space = gym.spaces.Dict({"cell": gym.spaces.Discrete(4, start=1), "x": gym.spaces.Box(-1, 1, (2,))})
        action_space = gym.spaces.Discrete(2)

        def reset(self, *, seed=None, options=None):
            return {"cell": 3, "x": np.zeros(2, np.float32)}, {}

    env = OneHotObservation(Mixed())
    assert env.reset()[0]["cell"].tolist() == [0, 0, 1, 0]
    assert make_environment_spec(env).observation["cell"] == ArraySpec((4,), np.float32)
    # Box observations keep their networks (and so their checkpoints): the same parameter trees as before.
    spec = spec_of("CartPole-v1")
    trees = {}
    for agent in ("dqn", "ppo"):
        builder = get_builder(agent)
        params = builder.make_learner(jax.random.PRNGKey(0), builder.make_networks(spec), iter([])).get_variables()[1]
        trees[agent] = jax.tree_util.tree_map(np.shape, params)
    assert trees["dqn"] == {
        "params": {
            "Dense_0": {"bias": (64,), "kernel": (4, 64)},
            "Dense_1": {"bias": (64,), "kernel": (64, 64)},
            "Dense_2": {"bias": (2,), "kernel": (64, 2)},
        }
    }
    assert set(trees["ppo"]["network"]["params"]) == {"policy", "value"} and trees["ppo"]["observation"]["mean"] == (4,)
