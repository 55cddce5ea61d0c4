"""The n-step adder's items, read back from a real Reverb table, against hand-computed values."""

import gymnasium as gym
import numpy as np
import pytest
import tree

from shoal.core.specs import make_environment_spec
from shoal.core.types import Step
from shoal.envs.environments import final_observations
from shoal.replay import NStepTransitionAdder, make_queue_table, make_replay_server, transition_signature
from tests.scripted_env import ScriptedEnv

GAMMA = 0.5


def collect_items(n_step: int, num_vector_steps: int, envs):
    vec = gym.vector.SyncVectorEnv(envs, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    spec = make_environment_spec(vec)
    signature = transition_signature(spec, {})
    table = make_queue_table("q", signature, 1000)
    server = make_replay_server([table])
    try:
        adder = NStepTransitionAdder(server.client, "q", spec, n_step, GAMMA)
        obs, _ = vec.reset(seed=0)
        for _ in range(num_vector_steps):
            action = np.zeros(vec.num_envs, np.int32)
            next_obs, reward, term, trunc, info = vec.step(action)
            adder.add(Step(obs, action, reward, term, trunc, final_observations(next_obs, term, trunc, info), {}))
            obs = next_obs
        adder.flush()
        num_items = num_vector_steps - n_step + 1
        assert server.client.server_info()["q"].current_size == num_items
        samples = [server.client.sample("q", num_samples=1, emit_timesteps=False) for _ in range(num_items)]
        return [tree.unflatten_as(signature, next(s).data) for s in samples]
    finally:
        server.stop()


def per_env(items, env_index):
    """(observation, reward, discount, next_observation) of one env, in start order."""
    return [
        (
            tuple(it["observation"][env_index]),
            float(it["reward"][env_index]),
            float(it["discount"][env_index]),
            tuple(it["next_observation"][env_index]),
        )
        for it in items
    ]


@pytest.fixture(scope="module")
def items():
    # env 0: episodes of 4 steps that terminate; env 1: episodes of 3 steps that are truncated.
    return collect_items(3, 9, [lambda: ScriptedEnv(4, "terminated"), lambda: ScriptedEnv(3, "truncated")])


def test_termination_does_not_bootstrap(items):
    # Rewards 1,2,3,4 then terminated. gamma = 0.5, n = 3.
    assert per_env(items, 0)[:5] == [
        ((0, 0), 1 + 0.5 * 2 + 0.25 * 3, 0.125, (0, 3)),  # full 3-step window
        ((0, 1), 2 + 0.5 * 3 + 0.25 * 4, 0.0, (0, 4)),  # window ends on the terminal step
        ((0, 2), 3 + 0.5 * 4, 0.0, (0, 4)),  # cut at the episode end
        ((0, 3), 4.0, 0.0, (0, 4)),
        ((1, 0), 1 + 0.5 * 2 + 0.25 * 3, 0.125, (1, 3)),  # next episode: fresh window
    ]


def test_truncation_bootstraps_from_final_observation(items):
    # Rewards 1,2,3 then truncated (time limit): bootstrap with gamma^m from the final obs.
    assert per_env(items, 1)[:5] == [
        ((0, 0), 1 + 0.5 * 2 + 0.25 * 3, 0.125, (0, 3)),
        ((0, 1), 2 + 0.5 * 3, 0.25, (0, 3)),
        ((0, 2), 3.0, 0.5, (0, 3)),
        ((1, 0), 1 + 0.5 * 2 + 0.25 * 3, 0.125, (1, 3)),
        ((1, 1), 2 + 0.5 * 3, 0.25, (1, 3)),
    ]


def test_one_step_is_plain_transition():
    items = collect_items(1, 5, [lambda: ScriptedEnv(2, "terminated")])
    assert per_env(items, 0) == [
        ((0, 0), 1.0, 0.5, (0, 1)),
        ((0, 1), 2.0, 0.0, (0, 2)),
        ((1, 0), 1.0, 0.5, (1, 1)),
        ((1, 1), 2.0, 0.0, (1, 2)),
        ((2, 0), 1.0, 0.5, (2, 1)),
    ]
