"""Run with XLA_FLAGS=--xla_force_host_platform_device_count=2 (see test_learner_pmap.py).

Prints one JSON line: for each agent's update function, the largest param difference between
a 1-device and a 2-device ``ReplicatedLearner`` after the same updates on the same global
batches, the spread between the 2 replicas, and how far the updates moved the params.
"""

import json
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np

from shoal.agents.dqn import DQNConfig, QNetwork
from shoal.agents.dqn import learning as dqn
from shoal.core.types import Sample
from shoal.learners import Placement, ReplicatedLearner

STEPS, BATCH, OBS = 3, 8, 4


def dqn_batches(seed: int, count: int):
    """Host batches in the transition layout ``[batch, steps, ...]``."""
    rng = np.random.default_rng(seed)
    for _ in range(count):
        yield Sample(
            {
                "observation": rng.normal(size=(BATCH, STEPS, OBS)).astype(np.float32),
                "action": rng.integers(0, 2, (BATCH, STEPS)).astype(np.int32),
                "reward": rng.normal(size=(BATCH, STEPS)).astype(np.float32),
                "discount": rng.choice([0.0, 0.99], (BATCH, STEPS)).astype(np.float32),
                "next_observation": rng.normal(size=(BATCH, STEPS, OBS)).astype(np.float32),
                "probability": rng.uniform(0.001, 0.01, (BATCH, STEPS)).astype(np.float32),
                "table_size": np.full((BATCH, STEPS), 500.0, np.float32),
            },
            keys=None,
        )


def dqn_case(prioritized: bool):
    config = DQNConfig(
        batch_size=BATCH,
        sgd_steps_per_update=STEPS,
        target_update_period=2,
        learning_rate=1e-2,
        prioritized_replay=prioritized,
    )
    network = QNetwork((16, 16), 2)
    return (
        dqn.init_state(jax.random.PRNGKey(0), network, (OBS,), config),
        dqn.make_update(network, config),
        list(dqn_batches(1, 4)),
    )


ROWS, LENGTH, ACTIONS = 8, 8, 3


def sequence_batches(seed: int, count: int, extras):
    """Host batches of env sequences ``[rows, T, ...]`` with episode ends inside."""
    rng = np.random.default_rng(seed)
    for _ in range(count):
        yield Sample(
            {
                "observation": rng.normal(size=(ROWS, LENGTH, OBS)).astype(np.float32),
                "action": rng.integers(0, ACTIONS, (ROWS, LENGTH)).astype(np.int32),
                "reward": rng.normal(size=(ROWS, LENGTH)).astype(np.float32),
                "terminated": rng.random((ROWS, LENGTH)) < 0.1,
                "truncated": rng.random((ROWS, LENGTH)) < 0.1,
                "next_observation": rng.normal(size=(ROWS, LENGTH, OBS)).astype(np.float32),
                "extras": {name: make(rng) for name, make in extras.items()},
            },
            keys=None,
        )


def ppo_case():
    from shoal.agents.components.networks import ActorCritic
    from shoal.agents.ppo import PPOConfig, PPONetworks
    from shoal.agents.ppo import learning as ppo

    config = PPOConfig(num_epochs=2, num_minibatches=2, learning_rate=1e-2)
    networks = PPONetworks(ActorCritic((16,), ACTIONS), (OBS,), ACTIONS)
    extras = {
        "log_prob": lambda rng: np.log(rng.uniform(0.2, 0.5, (ROWS, LENGTH))).astype(np.float32),
        "policy_version": lambda rng: np.zeros((ROWS, LENGTH), np.int32),
    }
    return (
        ppo.init_state(jax.random.PRNGKey(0), networks, config),
        ppo.make_update(networks, config),
        list(sequence_batches(2, 3, extras)),
    )


def ppo_dict_masked_case():
    """PPO on Dict observations (a float vector, normalized, and an action mask) and batches whose
    masks hold the actions taken."""
    from shoal.agents.components.networks import make_actor_critic_networks
    from shoal.agents.ppo import PPOConfig
    from shoal.agents.ppo import learning as ppo
    from shoal.core.specs import ArraySpec, EnvironmentSpec

    spec = EnvironmentSpec(
        None,
        None,
        {"x": ArraySpec((OBS,), np.float32), "action_mask": ArraySpec((ACTIONS,), np.int8)},
        ArraySpec((), np.int32),
        ACTIONS,
    )
    config = PPOConfig(num_epochs=2, num_minibatches=2, learning_rate=1e-2, normalize_observations=True)
    networks = make_actor_critic_networks(spec, (16,), "PPO")
    extras = {
        "log_prob": lambda rng: np.log(rng.uniform(0.2, 0.5, (ROWS, LENGTH))).astype(np.float32),
        "policy_version": lambda rng: np.zeros((ROWS, LENGTH), np.int32),
    }
    batches = []
    for sample in sequence_batches(4, 3, extras):
        data, rng = dict(sample.data), np.random.default_rng(5)
        for name in ("observation", "next_observation"):
            mask = (rng.random((ROWS, LENGTH, ACTIONS)) < 0.6).astype(np.int8)
            if name == "observation":
                mask[np.arange(ROWS)[:, None], np.arange(LENGTH)[None], data["action"]] = 1
            data[name] = {"x": data[name], "action_mask": mask}
        batches.append(Sample(data, None))
    return ppo.init_state(jax.random.PRNGKey(0), networks, config), ppo.make_update(networks, config), batches


def ppo_recurrent_case():
    """Recurrent PPO (an LSTM core; one minibatch of whole sequences per epoch, so the 2-device
    minibatch is the 1-device one: every row)."""
    from shoal.agents.components.recurrent import RecurrentActorCritic
    from shoal.agents.ppo import PPOConfig, PPONetworks
    from shoal.agents.ppo import learning as ppo

    config = PPOConfig(num_epochs=2, num_minibatches=1, learning_rate=1e-2, lstm_size=4)
    networks = PPONetworks(RecurrentActorCritic((16,), 4, ACTIONS), (OBS,), ACTIONS)
    extras = {
        "log_prob": lambda rng: np.log(rng.uniform(0.2, 0.5, (ROWS, LENGTH))).astype(np.float32),
        "policy_version": lambda rng: np.zeros((ROWS, LENGTH), np.int32),
        "core_state": lambda rng: rng.normal(size=(ROWS, LENGTH, 8)).astype(np.float32),
    }
    return (
        ppo.init_state(jax.random.PRNGKey(0), networks, config),
        ppo.make_update(networks, config),
        list(sequence_batches(6, 3, extras)),
    )


def impala_case():
    from shoal.agents.components.networks import ActorCritic
    from shoal.agents.impala import IMPALAConfig, IMPALANetworks
    from shoal.agents.impala import learning as impala

    config = IMPALAConfig(learning_rate=1e-2)
    networks = IMPALANetworks(ActorCritic((16,), ACTIONS), (OBS,), ACTIONS)
    extras = {
        "logits": lambda rng: rng.normal(size=(ROWS, LENGTH, ACTIONS)).astype(np.float32),
        "policy_version": lambda rng: np.zeros((ROWS, LENGTH), np.int32),
    }
    return (
        impala.init_state(jax.random.PRNGKey(0), networks, config),
        impala.make_update(networks.network, config),
        list(sequence_batches(3, 3, extras)),
    )


def sac_case():
    import gymnasium as gym

    from shoal.agents.sac import SACConfig, make_networks
    from shoal.agents.sac import learning as sac
    from shoal.core.specs import make_environment_spec

    class Box(gym.Env):
        observation_space = gym.spaces.Box(-1.0, 1.0, (OBS,), np.float32)
        action_space = gym.spaces.Box(-2.0, 2.0, (2,), np.float32)

    config = SACConfig(learning_rate=1e-2)
    networks = make_networks(make_environment_spec(Box()), (16,))
    rng = np.random.default_rng(4)
    batches = [
        Sample({**b.data, "action": rng.uniform(-2, 2, (BATCH, STEPS, 2)).astype(np.float32)}, None)
        for b in dqn_batches(5, 3)
    ]
    return sac.init_state(jax.random.PRNGKey(0), networks, config), sac.make_update(networks, config), batches


def train(devices, state, update, batches):
    learner = ReplicatedLearner(state, update, iter(batches), devices=devices)
    for _ in batches:
        learner.step()
    learner.check_finite()
    # every device's copy of the params, [num_devices, ...] per leaf
    replicas = jax.tree_util.tree_map(
        lambda x: np.stack([np.asarray(s.data) for s in x.addressable_shards]), learner._params
    )
    learner.close()
    return learner.get_variables()[1], replicas


def compare(devices, state, update, batches) -> dict:
    one, _ = train(devices[:1], state, update, batches)
    two, replicas = train(devices, state, update, batches)
    leaves = jax.tree_util.tree_leaves
    return {
        "max_diff": max(float(np.max(np.abs(a - b))) for a, b in zip(leaves(one), leaves(two))),
        "replica_spread": max(float(np.max(np.abs(r[0] - r[1]))) for r in leaves(replicas)),
        "max_update": max(float(np.max(np.abs(a - np.asarray(b)))) for a, b in zip(leaves(one), leaves(state.params))),
    }


def packed_against_plain(devices, state, update, batches) -> dict:
    """The same updates with each batch packed into one array (``shoal.learners.packing``) and
    with its fields placed one by one, both on ``devices``: the largest param difference."""
    params = {}
    for packed in ("1", "0"):
        os.environ["SHOAL_PACK_BATCHES"] = packed
        try:
            params[packed], _ = train(devices, state, update, batches)
        finally:
            del os.environ["SHOAL_PACK_BATCHES"]
    leaves = jax.tree_util.tree_leaves
    return {"max_diff": max(float(np.max(np.abs(a - b))) for a, b in zip(leaves(params["1"]), leaves(params["0"])))}


def aux_in_host_order(devices) -> bool:
    """Per-example outputs reach the after_update hook in the host batch's order."""
    from shoal.learners import AXIS_NAME, UpdateOutput

    seen = []

    def update(state, batch):  # aux: a function of each example alone (its id, doubled)
        return state, UpdateOutput({"loss": jax.lax.pmean(jnp.float32(0), AXIS_NAME)}, 1, batch["id"] * 2)

    batches = [Sample({"id": np.arange(8, dtype=np.int32) + 10 * i}) for i in range(3)]
    learner = ReplicatedLearner(
        {"params": jnp.zeros(())},
        update,
        iter(batches),
        devices=devices,
        after_update=lambda sample, aux: seen.append((sample.data["id"], np.asarray(aux))),
    )
    for _ in batches:
        learner.step()
    learner.close()  # (waits for the hook's thread)
    return len(seen) == 3 and all(np.array_equal(ids * 2, aux) for ids, aux in seen)


CASES = {
    "dqn_uniform": lambda: dqn_case(False),
    "dqn_prioritized": lambda: dqn_case(True),
    "ppo_epochs_x_minibatches": ppo_case,
    "ppo_dict_masked": ppo_dict_masked_case,
    "ppo_recurrent": ppo_recurrent_case,
    "impala_vtrace": impala_case,
    "sac": sac_case,
}

PACKED_CASES = ("dqn_prioritized", "ppo_dict_masked", "ppo_recurrent")


def main() -> None:
    devices = jax.local_devices()
    assert len(devices) == 2, devices
    placed = Placement(devices).shard({"x": np.arange(12).reshape(6, 2)})["x"]
    rows = {s.device: np.asarray(s.data).tolist() for s in placed.addressable_shards}
    out = {
        "num_devices": len(devices),
        "shard_layout_ok": placed.shape == (6, 2)
        and rows[devices[1]] == [[6, 7], [8, 9], [10, 11]]
        and rows[devices[0]] == [[0, 1], [2, 3], [4, 5]],
    }
    out["aux_in_host_order"] = aux_in_host_order(devices)
    os.environ["SHOAL_PACK_BATCHES"] = "1"
    try:
        out["aux_in_host_order_packed"] = aux_in_host_order(devices)
    finally:
        del os.environ["SHOAL_PACK_BATCHES"]
    out["packed"] = {name: packed_against_plain(devices, *CASES[name]()) for name in PACKED_CASES}
    for name, case in CASES.items():
        out[name] = compare(devices, *case())
    print(json.dumps(out))


if __name__ == "__main__":
    sys.exit(main())
