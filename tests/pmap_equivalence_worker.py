"""Run with XLA_FLAGS=--xla_force_host_platform_device_count=2 (see test_learner_pmap.py).

Prints one JSON line: the largest param difference between a 1-device and a 2-device learner
after the same updates on the same global batches, for uniform and prioritized DQN losses.
"""

import json
import sys

import jax
import numpy as np

from shoal.agents.dqn import DQNConfig, QNetwork
from shoal.agents.dqn.learning import init_state, make_sgd_step
from shoal.learners import SGDLearner
from shoal.replay import Sample, put_sharded

STEPS, BATCH, OBS = 3, 8, 4


def batches(seed: int, count: int):
    rng = np.random.default_rng(seed)
    for _ in range(count):
        yield {
            "observation": rng.normal(size=(STEPS, BATCH, OBS)).astype(np.float32),
            "action": rng.integers(0, 2, (STEPS, BATCH)).astype(np.int32),
            "reward": rng.normal(size=(STEPS, BATCH)).astype(np.float32),
            "discount": rng.choice([0.0, 0.99], (STEPS, BATCH)).astype(np.float32),
            "next_observation": rng.normal(size=(STEPS, BATCH, OBS)).astype(np.float32),
            "probability": rng.uniform(0.001, 0.01, (STEPS, BATCH)).astype(np.float32),
            "table_size": np.full((STEPS, BATCH), 500.0, np.float32),
        }


def train(devices, config) -> tuple:
    network = QNetwork((16, 16), 2)
    state = init_state(jax.random.PRNGKey(0), network, (OBS,), config)
    data = (Sample(put_sharded(b, devices), keys=None) for b in batches(1, 4))
    learner = SGDLearner(state, make_sgd_step(network, config), data, devices=devices)
    for _ in range(4):
        learner.step()
    replicas = jax.device_get(learner._state.params)  # [num_devices, ...] per leaf
    return learner.get_variables()[1], replicas


def main() -> None:
    devices = jax.local_devices()
    assert len(devices) == 2, devices
    out = {"num_devices": len(devices)}
    for prioritized in (False, True):
        config = DQNConfig(batch_size=BATCH, sgd_steps_per_update=STEPS, target_update_period=2,
                           learning_rate=1e-2, prioritized_replay=prioritized)
        one, _ = train(devices[:1], config)
        two, replicas = train(devices, config)
        diff = max(float(np.max(np.abs(a - b))) for a, b in
                   zip(jax.tree_util.tree_leaves(one), jax.tree_util.tree_leaves(two)))
        spread = max(float(np.max(np.abs(r[0] - r[1]))) for r in jax.tree_util.tree_leaves(replicas))
        moved = max(float(np.max(np.abs(a - b))) for a, b in zip(
            jax.tree_util.tree_leaves(one),
            jax.tree_util.tree_leaves(init_state(jax.random.PRNGKey(0), QNetwork((16, 16), 2), (OBS,), config).params)))
        out["prioritized" if prioritized else "uniform"] = {"max_diff": diff, "replica_spread": spread,
                                                             "max_update": moved}
    print(json.dumps(out))


if __name__ == "__main__":
    sys.exit(main())
