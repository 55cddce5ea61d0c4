"""Run with XLA_FLAGS=--xla_force_host_platform_device_count=2 (see test_learner_pmap.py).

Prints one JSON line: for each agent's update function, the largest param difference between
a 1-device and a 2-device ``ReplicatedLearner`` after the same updates on the same global
batches, the spread between the 2 replicas, and how far the updates moved the params.
"""

import json
import sys

import jax
import numpy as np

from shoal.agents.dqn import DQNConfig, QNetwork
from shoal.agents.dqn import learning as dqn
from shoal.learners import ReplicatedLearner, shard
from shoal.replay import Sample

STEPS, BATCH, OBS = 3, 8, 4


def dqn_batches(seed: int, count: int):
    """Host batches in the transition layout ``[batch, steps, ...]``."""
    rng = np.random.default_rng(seed)
    for _ in range(count):
        yield Sample({
            "observation": rng.normal(size=(BATCH, STEPS, OBS)).astype(np.float32),
            "action": rng.integers(0, 2, (BATCH, STEPS)).astype(np.int32),
            "reward": rng.normal(size=(BATCH, STEPS)).astype(np.float32),
            "discount": rng.choice([0.0, 0.99], (BATCH, STEPS)).astype(np.float32),
            "next_observation": rng.normal(size=(BATCH, STEPS, OBS)).astype(np.float32),
            "probability": rng.uniform(0.001, 0.01, (BATCH, STEPS)).astype(np.float32),
            "table_size": np.full((BATCH, STEPS), 500.0, np.float32),
        }, keys=None)


def dqn_case(prioritized: bool):
    config = DQNConfig(batch_size=BATCH, sgd_steps_per_update=STEPS, target_update_period=2,
                       learning_rate=1e-2, prioritized_replay=prioritized)
    network = QNetwork((16, 16), 2)
    return (dqn.init_state(jax.random.PRNGKey(0), network, (OBS,), config),
            dqn.make_update(network, config), list(dqn_batches(1, 4)))


def train(devices, state, update, batches):
    learner = ReplicatedLearner(state, update, iter(batches), devices=devices)
    for _ in batches:
        learner.step()
    replicas = jax.device_get(learner._state.params)  # [num_devices, ...] per leaf
    learner.close()
    return learner.get_variables()[1], replicas


def compare(devices, state, update, batches) -> dict:
    one, _ = train(devices[:1], state, update, batches)
    two, replicas = train(devices, state, update, batches)
    leaves = jax.tree_util.tree_leaves
    return {"max_diff": max(float(np.max(np.abs(a - b))) for a, b in zip(leaves(one), leaves(two))),
            "replica_spread": max(float(np.max(np.abs(r[0] - r[1]))) for r in leaves(replicas)),
            "max_update": max(float(np.max(np.abs(a - np.asarray(b))))
                              for a, b in zip(leaves(one), leaves(state.params)))}


CASES = {"dqn_uniform": lambda: dqn_case(False), "dqn_prioritized": lambda: dqn_case(True)}


def main() -> None:
    devices = jax.local_devices()
    assert len(devices) == 2, devices
    layout = np.asarray(shard({"x": np.arange(12).reshape(6, 2)}, devices)["x"])
    out = {"num_devices": len(devices), "shard_layout_ok": layout.shape == (2, 3, 2)
           and layout[1].tolist() == [[6, 7], [8, 9], [10, 11]]}
    for name, case in CASES.items():
        out[name] = compare(devices, *case())
    print(json.dumps(out))


if __name__ == "__main__":
    sys.exit(main())
