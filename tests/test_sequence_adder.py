"""The sequence adder's items, read back from a real Reverb table across episode ends."""

import gymnasium as gym
import numpy as np
import pytest
import tree

from shoal.core.specs import ArraySpec, make_environment_spec
from shoal.core.types import Step
from shoal.envs.environments import final_observations
from shoal.replay import SequenceAdder, make_queue_table, make_replay_server, sequence_batches, sequence_signature
from tests.scripted_env import ScriptedEnv

LENGTH = 3
EXTRAS = {"tag": ArraySpec((), np.float32)}


def fill(period, vector_steps):
    """A replay server holding the sequences of two scripted envs (env 0: episodes of 4 steps
    that terminate; env 1: episodes of 3 steps that are truncated). Each step's ``tag`` extra
    marks it: ``100 * vector step + env``."""
    vec = gym.vector.SyncVectorEnv(
        [lambda: ScriptedEnv(4, "terminated"), lambda: ScriptedEnv(3, "truncated")],
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
    )
    spec = make_environment_spec(vec)
    server = make_replay_server([make_queue_table("seq", sequence_signature(spec, EXTRAS, LENGTH), 100)])
    adder = SequenceAdder(server.client, "seq", spec, LENGTH, period)
    obs, _ = vec.reset(seed=0)
    for t in range(vector_steps):
        action = np.array([t % 2, 1], np.int32)
        next_obs, reward, term, trunc, info = vec.step(action)
        extras = {"tag": np.array([100 * t, 100 * t + 1], np.float32)}
        adder.add(Step(obs, action, reward, term, trunc, final_observations(next_obs, term, trunc, info), extras))
        obs = next_obs
    return server


def test_items_are_time_major_sequences_every_period():
    server = fill(period=2, vector_steps=9)
    try:
        # Items end at vector steps 3, 5, 7, 9 (a new one every 2 steps, overlapping by 1).
        assert server.client.server_info()["seq"].current_size == 4
        signature = server.client.server_info()["seq"].signature
        items = [
            tree.unflatten_as(signature, next(iter(server.client.sample("seq", emit_timesteps=False))).data)
            for _ in range(4)
        ]
    finally:
        server.stop()
    tags = [item["extras"]["tag"] for item in items]  # [LENGTH, num_envs]
    assert [t[:, 0].tolist() for t in tags] == [[0, 100, 200], [200, 300, 400], [400, 500, 600], [600, 700, 800]]
    assert all(t.shape == (LENGTH, 2) for t in tags)


@pytest.fixture(scope="module")
def rows():
    """Every env sequence, as ``sequence_batches`` lays them out: ``[items * envs, LENGTH, ...]``."""
    server = fill(period=LENGTH, vector_steps=6)  # no overlap: two items
    try:
        return next(sequence_batches(server.client, "seq", num_envs=2, num_items=2)).data
    finally:
        server.stop()


def test_sequences_cross_episode_ends_without_padding(rows):
    # rows: [item0-env0, item0-env1, item1-env0, item1-env1], each LENGTH steps
    assert rows["observation"].shape == (4, LENGTH, 2)
    env0 = np.concatenate([rows["observation"][0], rows["observation"][2]])  # 6 steps of env 0
    assert env0.tolist() == [[0, 0], [0, 1], [0, 2], [0, 3], [1, 0], [1, 1]]  # episode 1 starts at step 4
    np.testing.assert_array_equal(rows["extras"]["tag"][2], [300, 400, 500])


def test_termination_and_truncation_flags_and_bootstrap_observations(rows):
    env0_next = np.concatenate([rows["next_observation"][0], rows["next_observation"][2]])
    env0_term = np.concatenate([rows["terminated"][0], rows["terminated"][2]])
    # The terminal step's next observation is the final one [0, 4], not the reset [1, 0].
    assert env0_next.tolist()[3] == [0, 4] and env0_term.tolist() == [False] * 3 + [True, False, False]
    env1_next = np.concatenate([rows["next_observation"][1], rows["next_observation"][3]])
    env1_trunc = np.concatenate([rows["truncated"][1], rows["truncated"][3]])
    env1_term = np.concatenate([rows["terminated"][1], rows["terminated"][3]])
    # env 1 is truncated after 3 steps: bootstrap from its final observation [0, 3].
    assert env1_trunc.tolist() == [False, False, True, False, False, True] and not env1_term.any()
    assert env1_next.tolist()[2] == [0, 3] and env1_next.tolist()[5] == [1, 3]
    np.testing.assert_array_equal(rows["reward"][0], [1, 2, 3])
