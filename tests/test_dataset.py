"""Host batches from a real Reverb table, and priority updates."""

import threading

import jax
import numpy as np
import pytest
import tree

from shoal.core.specs import make_environment_spec
from shoal.core.types import Step
from shoal.envs import make_vector_env
from shoal.replay import (
    SequenceAdder,
    item_priorities,
    make_queue_table,
    make_replay_server,
    make_transition_table,
    sequence_batches,
    sequence_signature,
    transition_batches,
    transition_signature,
    update_item_priorities,
)

NUM_ENVS = 4


def make_server(prioritized=False, num_items=10):
    spec = make_environment_spec(make_vector_env("CartPole-v1", NUM_ENVS, seed=0))
    table = make_transition_table(
        "t",
        transition_signature(spec, {}),
        num_envs=NUM_ENVS,
        batch_size=4,
        sgd_steps_per_update=1,
        samples_per_insert=1e6,
        samples_per_insert_tolerance=1e9,
        min_replay_size=1,
        max_replay_size=400,
        priority_exponent=1.0 if prioritized else None,
    )
    server = make_replay_server([table])
    writer = server.client.writer(1)  # (the backend's writer, as the adders use it)
    for i in range(num_items):
        # transition j of item i is marked by observation[0] = 10 * i + j
        obs = np.zeros((NUM_ENVS, 4), np.float32)
        obs[:, 0] = 10 * i + np.arange(NUM_ENVS)
        writer.append(
            tree.flatten(
                {
                    "observation": obs,
                    "action": np.zeros(NUM_ENVS, np.int32),
                    "reward": obs[:, 0].copy(),
                    "discount": np.ones(NUM_ENVS, np.float32),
                    "next_observation": obs,
                }
            )
        )
        writer.create_item("t", 1.0, 1)
        writer.commit()
    writer.flush()
    writer.close()
    return server


def test_transition_batches_are_flattened_items_batch_major():
    server = make_server()
    try:
        it = transition_batches(server.client, "t", num_envs=NUM_ENVS, batch_size=6, num_steps=3)
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


@pytest.mark.e2e  # (waits out several stream timeouts by design: 1.5 s)
def test_a_batch_waits_across_streams_and_loses_no_item():
    # A queue sampled 2 items per batch: with one item in, the stream times out (poll_s) and a
    # new one is opened; the item already served is kept, and the batch completes on the next.
    spec = make_environment_spec(make_vector_env("CartPole-v1", NUM_ENVS, seed=0))
    server = make_replay_server([make_queue_table("q", sequence_signature(spec, {}, 2), 10)])
    adder = SequenceAdder(server.client, "q", spec, 2)
    try:
        it = sequence_batches(server.client, "q", num_envs=NUM_ENVS, num_items=2)
        batches = []
        reader = threading.Thread(target=lambda: batches.append(next(it)))
        for t in range(2):  # one item: vector steps 0 and 1
            adder.add(scripted_step(t))
        reader.start()
        reader.join(1.5)  # several stream timeouts pass with half a batch
        assert reader.is_alive() and not batches
        for t in range(2, 4):  # the second item
            adder.add(scripted_step(t))
        reader.join(10)
        assert [int(x) for x in batches[0].data["reward"][::NUM_ENVS, 0]] == [0, 2]  # items 1 and 2, in order
        it.close()
        with pytest.raises(StopIteration):
            next(it)
    finally:
        server.stop()


def scripted_step(t):
    obs = np.full((NUM_ENVS, 4), t, np.float32)
    flags = np.zeros(NUM_ENVS, bool)
    return Step(obs, np.zeros(NUM_ENVS, np.int32), np.full(NUM_ENVS, t, np.float32), flags, flags, obs, {})


@pytest.mark.parametrize(
    "agent, env_id", [("dqn", "CartPole-v1"), ("ppo", "CartPole-v1"), ("impala", "CartPole-v1"), ("sac", "Pendulum-v1")]
)
def test_an_agents_example_batch_is_laid_out_as_its_dataset_yields(agent, env_id):
    # example_batch needs no replay server (what feeds a learner where Reverb is not installed);
    # it must match what the dataset of a real table yields, field by field.
    from shoal.agents import get_builder
    from shoal.core.specs import make_environment_spec
    from shoal.envs import make_vector_env

    builder = get_builder(agent)
    env = make_vector_env(env_id, 4, 0)
    spec = make_environment_spec(env)
    env.close()
    policy = builder.make_policy(builder.make_networks(spec), spec, evaluation=False)
    server = make_replay_server(builder.make_replay_tables(spec, policy))
    try:
        dataset = builder.make_dataset_iterator(server.client, spec)
        real, example = dataset.example(), builder.example_batch(spec, policy)
        dataset.close()
    finally:
        server.stop()
    layout = lambda sample: jax.tree_util.tree_map(lambda x: (x.shape, x.dtype), sample.data)  # noqa: E731
    assert layout(example) == layout(real)


@pytest.mark.e2e  # (a real Reverb server and dataset raced for ~8 s)
def test_a_queue_written_around_the_stream_timeout_loses_no_item():
    """Items that arrive as a stream times out (Reverb drops what a worker fetched ahead: about 4
    in 1,000 before ``each_item_once``) all reach the queue's reader."""
    import random

    reverb = pytest.importorskip("reverb")  # (Reverb's own dataset; the native one fetches nothing ahead)
    import tensorflow as tf

    from shoal.replay.dataset import ReplayIterator

    count, poll_s = 400, 0.02
    table = reverb.Table.queue("q", count, signature={"x": tf.TensorSpec([1], tf.int64)})
    server = reverb.Server([table])
    address = f"localhost:{server.port}"
    it = ReplayIterator(
        address, "q", 1, 1, layout=lambda data, info: int(data["x"][0, 0]), poll_s=poll_s, each_item_once=True
    )
    received = []
    reader = threading.Thread(target=lambda: received.extend(next(it) for _ in range(count)), daemon=True)
    reader.start()
    pause = random.Random(0)
    try:
        with reverb.Client(address).trajectory_writer(num_keep_alive_refs=1) as writer:
            for i in range(count):
                writer.append({"x": np.array([i])})
                writer.create_item("q", 1.0, {"x": writer.history["x"][-1]})
                writer.flush()
                threading.Event().wait(pause.uniform(0.0, 2 * poll_s))  # (around the stream's timeout)
        reader.join(60)  # (every item was written: the reader ends as soon as the last arrives)
        assert sorted(received) == list(range(count)), f"lost: {sorted(set(range(count)) - set(received))}"
    finally:
        it.close()
        server.stop()
