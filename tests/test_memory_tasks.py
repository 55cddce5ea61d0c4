"""Tasks that need memory: ``shoal/CartPoleNoVelocity-v1`` (shipped by Shoal) is found by id
alone and is CartPole-v1 with its velocities hidden; popgym's are found by id (the popgym extra),
with their Discrete and MultiDiscrete observations one-hot; both get the memory presets."""

import gymnasium as gym
import numpy as np
import pytest

from shoal.envs import environment_spec, make_vector_env
from shoal.launch.experiments.cli.main import main

NO_VELOCITY = "shoal/CartPoleNoVelocity-v1"


def test_the_velocity_free_cart_pole_is_cart_pole_without_its_velocities():
    spec = environment_spec(NO_VELOCITY, 4)
    assert spec.observation.shape == (2,) and spec.num_actions == 2
    assert gym.spec(NO_VELOCITY).reward_threshold == 475.0 and gym.spec(NO_VELOCITY).max_episode_steps == 500
    hidden, full = make_vector_env(NO_VELOCITY, 2, seed=3), make_vector_env("CartPole-v1", 2, seed=3)
    (seen, _), (whole, _) = hidden.reset(seed=3), full.reset(seed=3)
    for _ in range(20):
        np.testing.assert_array_equal(seen, whole[:, [0, 2]].astype(np.float32))  # position and angle only
        actions = np.array([0, 1])
        seen, reward, *_ = hidden.step(actions)
        whole, full_reward, *_ = full.step(actions)
        np.testing.assert_array_equal(reward, full_reward)
    hidden.close(), full.close()


def test_shoal_train_finds_it_by_its_id_alone(tmp_path, capsys):
    assert main(["train", "--agent", "ppo", "--env", NO_VELOCITY, "--dry-run", "--run-dir", str(tmp_path / "run")]) == 0
    assert NO_VELOCITY in capsys.readouterr().out


def test_a_multi_discrete_observation_is_the_one_hots_of_its_entries():
    from shoal.envs.observations import OneHotObservation

    class Cards(gym.Env):
        observation_space = gym.spaces.MultiDiscrete([2, 3], start=[0, 1])
        action_space = gym.spaces.Discrete(2)

        def reset(self, seed=None, options=None):
            return np.array([1, 3]), {}

    env = OneHotObservation(Cards())
    assert env.observation_space.shape == (5,)
    np.testing.assert_array_equal(env.reset()[0], [0, 1, 0, 0, 1])


@pytest.mark.parametrize(
    "env_id, size",
    [("popgym-RepeatPreviousEasy-v0", 4), ("popgym-CountRecallEasy-v0", 4), ("popgym-PositionOnlyCartPoleEasy-v0", 2)],
)
def test_popgym_tasks_are_found_by_id_with_the_memory_presets(env_id, size, tmp_path, capsys):
    pytest.importorskip("popgym")
    from shoal.agents.presets import find_preset

    assert environment_spec(env_id, 2).observation.shape == (size,)
    assert find_preset("ppo", env_id).name == "ppo/memory" and find_preset("r2d2", env_id).name == "r2d2/memory"
    assert main(["train", "--agent", "ppo", "--env", env_id, "--dry-run", "--run-dir", str(tmp_path / "run")]) == 0
    assert env_id in capsys.readouterr().out
