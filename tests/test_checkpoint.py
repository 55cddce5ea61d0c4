"""A learner restored from its saved state resumes exactly (the orbax round trip is tested by
the resume tests in tests/faults)."""

import threading

import jax
import numpy as np

from shoal.agents.dqn import DQNConfig, QNetwork
from shoal.agents.dqn.learning import init_state, make_update
from shoal.core.loggers import Logger
from shoal.learners import ReplicatedLearner
from tests.pmap_equivalence_worker import BATCH, OBS, STEPS, dqn_batches


def make_learner(config, batches, logger=None):
    network = QNetwork((16, 16), 2)
    state = init_state(jax.random.PRNGKey(0), network, (OBS,), config)
    return ReplicatedLearner(
        state, make_update(network, config), iter(batches), devices=jax.local_devices()[:1], logger=logger
    )


def leaves(tree):
    return [np.asarray(x) for x in jax.tree_util.tree_leaves(tree)]


def test_restore_resumes_exactly(tmp_path):
    config = DQNConfig(batch_size=BATCH, sgd_steps_per_update=STEPS, target_update_period=4)
    batches = list(dqn_batches(1, 5))
    original = make_learner(config, batches)
    for _ in range(3):
        original.step()
    saved = jax.tree_util.tree_map(np.asarray, original.save())  # (what the orbax checkpoint holds)

    restored = make_learner(config, batches[3:])  # fed the batches the original has not used
    restored.restore(saved)
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
    config = DQNConfig(batch_size=BATCH, sgd_steps_per_update=1)
    batch = next(dqn_batches(3, 1))
    one_step = batch._replace(data={k: v[:, :1] for k, v in batch.data.items()})
    learner = make_learner(config, [one_step] * 100)
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
    for _ in range(100):
        learner.step()
    done.set()
    reader.join()
    assert not errors, errors[0]
    assert learner.get_variables()[0] == 100


def test_a_learner_whose_updates_all_fit_in_a_second_still_logs_its_last_one():
    """The learner reads metrics once a second; ``check_finite`` (every runner calls it at the
    end) logs the last update's row if that read skipped it, so no learner log ends empty."""

    class Rows(Logger):
        def __init__(self):
            self.rows = []

        def write(self, values):
            self.rows.append(dict(values))

    config = DQNConfig(batch_size=BATCH, sgd_steps_per_update=1)
    batch = next(dqn_batches(3, 1))
    one_step = batch._replace(data={k: v[:, :1] for k, v in batch.data.items()})
    logger = Rows()
    learner = make_learner(config, [one_step] * 2, logger)
    try:
        learner.step(), learner.step()
        learner.check_finite()
        learner.check_finite()  # (nothing new: no second row)
    finally:
        learner.close()
    assert len(logger.rows) <= 2 and logger.rows[-1]["learner_steps"] == 2, logger.rows
    assert np.isfinite(logger.rows[-1]["loss"])
