"""Host batches from a real Reverb table, their device sharding, and priority updates."""

import numpy as np

from shoal.actors import make_vector_env
from shoal.core.specs import make_environment_spec
from shoal.replay import (ReplayServer, item_priorities, make_transition_table, transition_batches,
                          transition_signature, update_item_priorities)

NUM_ENVS = 4


def make_server(prioritized=False, num_items=10):
    spec = make_environment_spec(make_vector_env("CartPole-v1", NUM_ENVS, seed=0))
    table = make_transition_table("t", transition_signature(spec, {}), num_envs=NUM_ENVS,
                                  batch_size=4, sgd_steps_per_update=1, samples_per_insert=1e6,
                                  samples_per_insert_tolerance=1e9, min_replay_size=1,
                                  max_replay_size=400, prioritized=prioritized, priority_exponent=1.0)
    server = ReplayServer([table])
    with server.client.trajectory_writer(num_keep_alive_refs=1) as writer:
        for i in range(num_items):
            # transition j of item i is marked by observation[0] = 10 * i + j
            obs = np.zeros((NUM_ENVS, 4), np.float32)
            obs[:, 0] = 10 * i + np.arange(NUM_ENVS)
            writer.append({"observation": obs, "action": np.zeros(NUM_ENVS, np.int32),
                           "reward": obs[:, 0].copy(), "discount": np.ones(NUM_ENVS, np.float32),
                           "next_observation": obs})
            writer.create_item("t", 1.0, {k: writer.history[k][-1] for k in writer.history})
        writer.flush()
    return server


def test_transition_batches_are_flattened_items_batch_major():
    server = make_server()
    try:
        it = transition_batches(server.address, "t", num_envs=NUM_ENVS, batch_size=6, num_steps=3)
        assert it.items_per_update == 6 and it.num_envs == NUM_ENVS  # 3 steps x 2 items
        sample = next(it)
        obs = sample.data["observation"]
        assert obs.shape == (6, 3, 4)  # [batch, steps, obs]: the batch axis leads
        assert sample.keys.shape == (3, 2)
        marks = obs[:, :, 0].T.astype(int)  # [steps, batch]
        for step in marks:  # each step's batch: all 4 of one item, then the first 2 of another
            assert list(step[:4] % 10) == [0, 1, 2, 3] and list(step[4:] % 10) == [0, 1]
            assert len(set(step[:4] // 10)) == 1 and len(set(step[4:] // 10)) == 1
        np.testing.assert_array_equal(sample.data["reward"].T, marks)
        np.testing.assert_allclose(sample.data["probability"], 0.1)
        np.testing.assert_allclose(sample.data["table_size"], 10)
    finally:
        server.stop()


def test_item_priorities_take_max_of_used_transitions():
    td = np.array([[1.0, 5.0, 2.0, 0.5, 3.0, 9.0]])  # one step, batch 6 = item of 4 + 2 used
    np.testing.assert_allclose(item_priorities(td, 2, NUM_ENVS, epsilon=0.0), [[5.0, 9.0]])


def test_priority_updates_change_sampling():
    server = make_server(prioritized=True)
    try:
        sample = next(iter(server.client.sample("t", num_samples=1, emit_timesteps=False)))
        keep = int(sample.info.key)
        keys = [int(s.info.key) for s in server.client.sample("t", num_samples=200, emit_timesteps=False)]
        all_keys = np.array(sorted(set(keys) | {keep}), np.uint64)
        priorities = np.where(all_keys == keep, 1.0, 0.0)
        update_item_priorities(server.client, "t", all_keys, priorities)
        after = {int(s.info.key) for s in server.client.sample("t", num_samples=50, emit_timesteps=False)}
        assert after == {keep}
    finally:
        server.stop()
