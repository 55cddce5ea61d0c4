"""The JAX env adapter (``shoal.envs.jax_envs``) on an env of the test's own with gymnax's
functional API: no gymnax needed, so these run in CI (the gymnax ids and the compiled loop are
``tests/test_anakin.py``'s, skipped without the extra)."""

from typing import NamedTuple

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from shoal.envs.jax_envs import JaxEnv, JaxGymVectorEnv, is_jax_env
from shoal.envs.jax_vector import JaxVectorEnv


class CountState(NamedTuple):
    t: jax.Array


class Params(NamedTuple):
    length: int = 3
    truncate: bool = False


class CountTo(JaxEnv):
    """Observes its step count; reward 1 a step; the episode ends at ``length`` steps (a
    termination, or with ``truncate`` a time limit in ``info``); gymnax's older five values, no
    reset of its own."""

    @property
    def default_params(self) -> Params:
        return Params()

    def reset(self, key, params):
        return jnp.zeros(1, jnp.float32), CountState(jnp.int32(0))

    def step(self, key, state, action, params):
        t = state.t + 1 + 0 * action
        done = t >= params.length
        info = {"truncated": done} if params.truncate else {}
        return t.astype(jnp.float32)[None], CountState(t), jnp.float32(1.0), done, info

    def observation_space(self, params):
        return gym.spaces.Box(0, 100, (1,), np.float32)

    def action_space(self, params):
        return gym.spaces.Discrete(2)


@pytest.mark.parametrize("truncate", [False, True])
def test_the_adapter_resets_inside_step_and_tracks_episodes(truncate):
    venv = JaxVectorEnv(CountTo(), 2, Params(truncate=truncate))
    assert venv.spec.num_actions == 2 and venv.spec.observation.shape == (1,) and not venv.auto_resets
    obs, state = venv.reset(jax.random.PRNGKey(0))
    step = jax.jit(venv.step)
    for _ in range(3):
        state, out = step(jax.random.PRNGKey(1), state, jnp.zeros(2, jnp.int32))
    np.testing.assert_array_equal(out.final_observation[:, 0], [3, 3])  # (the step's own last observation)
    np.testing.assert_array_equal(out.observation[:, 0], [0, 0])  # (the next episode's first)
    np.testing.assert_array_equal(out.terminated, [not truncate] * 2)
    np.testing.assert_array_equal(out.truncated, [truncate] * 2)
    np.testing.assert_array_equal(out.episode_return, [3.0, 3.0])
    np.testing.assert_array_equal(out.episode_length, [3, 3])
    np.testing.assert_array_equal(state.episode_return, [0.0, 0.0])
    state, out = step(jax.random.PRNGKey(2), state, jnp.zeros(2, jnp.int32))
    np.testing.assert_array_equal(out.episode_return, [0.0, 0.0])  # (no episode ended here)
    np.testing.assert_array_equal(state.episode_length, [1, 1])


def test_a_space_shoal_cannot_map_is_one_line():
    class Multi(CountTo):
        def action_space(self, params):
            return gym.spaces.MultiDiscrete([2, 3])

    with pytest.raises(ValueError, match=r"^action space MultiDiscrete\(\[2 3\]\) \(MultiDiscrete\) is not supported"):
        JaxVectorEnv(Multi(), 2)


def test_jax_env_ids_are_named_by_their_source():
    assert is_jax_env("gymnax:CartPole-v1")
    assert not is_jax_env("CartPole-v1") and not is_jax_env("gymnax_blines:GymnaxBreakout-v0")


def test_as_a_gymnasium_vector_env_it_resets_in_the_same_step():
    env = JaxGymVectorEnv(CountTo(), Params(), 2)
    assert env.metadata["autoreset_mode"] == gym.vector.AutoresetMode.SAME_STEP
    obs, _ = env.reset(seed=0)
    assert obs.shape == (2, 1) and env.single_action_space == gym.spaces.Discrete(2)
    for _ in range(3):
        obs, reward, terminated, truncated, info = env.step(np.zeros(2, np.int64))
    np.testing.assert_array_equal(obs[:, 0], [0, 0])  # (the next episode's first observation)
    np.testing.assert_array_equal(terminated, [True, True])
    assert not truncated.any() and reward.dtype == np.float64
    np.testing.assert_array_equal(np.stack(info["final_obs"])[:, 0], [3, 3])
    np.testing.assert_array_equal(info["_final_obs"], [True, True])
    _, _, terminated, _, info = env.step(np.zeros(2, np.int64))
    assert not terminated.any() and "final_obs" not in info
