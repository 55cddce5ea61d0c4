"""EnvPool as an env backend (``envpool:<task>``): gymnasium's same-step autoreset, truncation and
final observations, seeded runs alike, the actor loop on it, and one-line errors."""

from __future__ import annotations

import jax
import numpy as np
import pytest

pytest.importorskip("envpool")

from shoal.actors import BatchedActor, VariableClient  # noqa: E402
from shoal.actors.loops import EnvironmentLoop  # noqa: E402
from shoal.agents import get_builder  # noqa: E402
from shoal.core.specs import make_environment_spec  # noqa: E402
from shoal.envs import make_vector_env  # noqa: E402
from shoal.envs.environments import environment_spec, resolve_env_id  # noqa: E402


def _rollout(seed: int, steps: int):
    env = make_vector_env("envpool:CartPole-v1", 4, seed=seed)
    obs, _ = env.reset(seed=seed)
    out = [obs]
    for i in range(steps):
        obs, reward, terminated, truncated, info = env.step(np.full(4, i % 2))
        out.append(obs)
    env.close()
    return np.stack(out)


def test_same_step_autoreset_with_final_observations() -> None:
    env = make_vector_env("envpool:CartPole-v1", 4, seed=0)
    obs, _ = env.reset(seed=0)
    for _ in range(100):  # (always pushing right: each episode terminates within ~10 steps)
        before = obs
        obs, reward, terminated, truncated, info = env.step(np.ones(4, np.int64))
        if terminated.any():
            break
    assert terminated.any() and not truncated.any()
    i = int(terminated.nonzero()[0][0])
    final = info["final_obs"][i]
    assert abs(final[2]) > 0.2 or abs(final[0]) > 2.4  # (the pole fell: CartPole's termination)
    assert np.all(np.abs(obs[i]) <= 0.05)  # (the next episode's first observation, from the same step)
    assert reward[i] == 1.0 and final[1] > before[i][1]  # (a real transition: pushed right)
    env.close()


def test_time_limit_truncates() -> None:
    env = make_vector_env("envpool:CartPole-v1", 2, seed=0, env_args={"max_episode_steps": 5})
    env.reset(seed=0)
    flags = [env.step(np.array([0, 1]))[2:4] for _ in range(5)]
    terminated, truncated = flags[-1]
    assert truncated.all() and not terminated.any()
    assert not any(t.any() for _, t in flags[:-1])
    env.close()


def test_seeded_runs_are_alike() -> None:
    np.testing.assert_array_equal(_rollout(3, 60), _rollout(3, 60))
    assert not np.array_equal(_rollout(3, 5), _rollout(4, 5))


def test_spec_and_actor_loop() -> None:
    spec = environment_spec("envpool:CartPole-v1", 8)
    env = make_vector_env("envpool:CartPole-v1", 8, seed=0)
    assert make_environment_spec(env).observation == spec.observation
    builder = get_builder("dqn")
    networks = builder.make_networks(spec)
    params = builder.init_state(jax.random.PRNGKey(0), networks).params

    class Fixed:
        def get_variables(self, known_version: int = -1):
            return 0, (None if known_version == 0 else params)

    actor = BatchedActor(
        builder.make_policy(networks, spec, evaluation=False),
        jax.random.PRNGKey(0),
        VariableClient(Fixed(), asynchronous=False),
        num_envs=8,
    )
    loop = EnvironmentLoop(env, actor)
    for _ in range(50):
        loop.step()
    assert loop.env_steps == 400
    env.close()


def test_atari_protocol_frames() -> None:
    spec = environment_spec("envpool:Pong-v5", 2)
    assert spec.observation.shape == (4, 84, 84) and spec.observation.dtype == np.uint8


def test_unknown_task_is_one_line() -> None:
    with pytest.raises(
        ValueError, match="unknown EnvPool task 'envpool:CartPole-v9'; did you mean 'envpool:CartPole-v1'"
    ):
        resolve_env_id("envpool:CartPole-v9")
