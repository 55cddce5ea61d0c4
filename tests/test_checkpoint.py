"""A learner restored from a checkpoint resumes exactly."""

import jax
import numpy as np

from shoal.agents.dqn import DQNConfig, QNetwork
from shoal.agents.dqn.learning import init_state, make_sgd_step
from shoal.learners import SGDLearner, restore_checkpoint, save_checkpoint
from shoal.replay import Sample, put_sharded
from tests.pmap_equivalence_worker import STEPS, BATCH, OBS, batches


def make_learner(config, seed_of_data):
    network = QNetwork((16, 16), 2)
    state = init_state(jax.random.PRNGKey(0), network, (OBS,), config)
    devices = jax.local_devices()[:1]
    data = (Sample(put_sharded(b, devices), keys=None) for b in batches(seed_of_data, 6))
    return SGDLearner(state, make_sgd_step(network, config), data, devices=devices)


def leaves(tree):
    return [np.asarray(x) for x in jax.tree_util.tree_leaves(tree)]


def test_restore_resumes_exactly(tmp_path):
    config = DQNConfig(batch_size=BATCH, sgd_steps_per_update=STEPS, target_update_period=4)
    original = make_learner(config, seed_of_data=1)
    for _ in range(3):
        original.step()
    path = save_checkpoint(original, str(tmp_path / "learner.ckpt"))

    restored = make_learner(config, seed_of_data=1)
    for _ in range(3):  # consume the same first batches, so both iterators are aligned
        next(restored._iterator)
    restore_checkpoint(restored, path)
    assert restored.get_variables()[0] == original.get_variables()[0] == 3
    for a, b in zip(leaves(original.state), leaves(restored.state)):
        np.testing.assert_array_equal(a, b)  # params, target params, Adam moments, step count

    for _ in range(2):
        original.step()
        restored.step()
    for a, b in zip(leaves(original.get_variables()[1]), leaves(restored.get_variables()[1])):
        np.testing.assert_array_equal(a, b)


def test_get_variables_while_updating_from_another_thread():
    # Updates donate the previous state's buffers; a reader (an RPC thread in a distributed
    # learner) must never see a deleted array.
    import threading

    config = DQNConfig(batch_size=BATCH, sgd_steps_per_update=1)
    network = QNetwork((16, 16), 2)
    state = init_state(jax.random.PRNGKey(0), network, (OBS,), config)
    devices = jax.local_devices()[:1]
    data = [Sample(put_sharded({k: v[:1] for k, v in b.items()}, devices), keys=None)
            for b in batches(3, 1)] * 300
    learner = SGDLearner(state, make_sgd_step(network, config), iter(data), devices=devices)
    errors, done = [], threading.Event()

    def read():
        while not done.is_set():
            try:
                version, params = learner.get_variables()
                leaves(params)
            except Exception as e:  # noqa: BLE001
                errors.append(e)
                return

    reader = threading.Thread(target=read)
    reader.start()
    for _ in range(300):
        learner.step()
    done.set()
    reader.join()
    assert not errors, errors[0]
    assert learner.get_variables()[0] == 300
