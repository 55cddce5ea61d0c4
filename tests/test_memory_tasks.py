"""Tasks that need memory, shipped by Shoal: ``shoal/CartPoleNoVelocity-v1`` is found by id
alone and is CartPole-v1 with its velocities hidden."""

import gymnasium as gym
import numpy as np

from shoal.actors import environment_spec, make_vector_env
from shoal.launch.experiments.cli import main

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
