"""The replay client of a process that never imported TensorFlow (an actor node) writes through
Reverb's C++ client alone: a real adder in a fresh process, its items read back from a real
table, and no ``tensorflow`` module in that process."""

import json
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest

reverb = pytest.importorskip("reverb")  # (Reverb's own client and protos: Python 3.11)
import tree

from shoal.core.specs import make_environment_spec
from shoal.replay import ReverbServer, make_queue_table, transition_signature
from shoal.replay.reverb.client import ReverbClient

pytestmark = pytest.mark.e2e  # a real Reverb server and a second process

NUM_ENVS, VECTOR_STEPS = 3, 5
WRITER = f"""
import json, sys
import numpy as np
import gymnasium as gym
from shoal.core.specs import make_environment_spec
from shoal.core.types import Step
from shoal.replay import NStepTransitionAdder, make_replay_client

vec = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * {NUM_ENVS})
adder = NStepTransitionAdder(make_replay_client(sys.argv[1]), "q", make_environment_spec(vec), 1, 0.5)
for t in range({VECTOR_STEPS}):
    obs = np.full(({NUM_ENVS}, 4), t, np.float32)
    flags = np.zeros({NUM_ENVS}, bool)
    adder.add(Step(obs, np.arange({NUM_ENVS}), np.full({NUM_ENVS}, float(t)), flags, flags, obs + 0.5, {{}}))
adder.flush()
adder.close()
print(json.dumps({{"tensorflow": "tensorflow" in sys.modules, "reverb": "reverb" in sys.modules}}))
"""


def test_a_process_without_tensorflow_writes_items_a_table_reads_back():
    spec = make_environment_spec(gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * NUM_ENVS))
    signature = transition_signature(spec, {})
    server = ReverbServer([make_queue_table("q", signature, 100)])
    try:
        proc = subprocess.run(
            [sys.executable, "-c", WRITER, server.address], capture_output=True, text=True, timeout=120
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"tensorflow": False, "reverb": False}
        assert server.client.server_info()["q"].current_size == VECTOR_STEPS
        for t in range(VECTOR_STEPS):  # (a queue: in the order written)
            item = tree.unflatten_as(signature, next(server.client.sample("q", emit_timesteps=False)).data)
            assert np.array_equal(item["observation"], np.full((NUM_ENVS, 4), t, np.float32))
            assert np.array_equal(item["next_observation"], np.full((NUM_ENVS, 4), t + 0.5, np.float32))
            assert np.array_equal(item["action"], np.arange(NUM_ENVS)) and np.all(item["reward"] == t)
    finally:
        server.stop()


def test_where_tensorflow_is_loaded_the_client_is_reverbs_own():
    server = ReverbServer([reverb.Table.queue("q", max_size=10)])
    try:
        client = ReverbClient(server.address)
        assert client.server_info()["q"].current_size == 0  # (through a reverb.Client)
        with pytest.raises(ValueError, match="num_keep_alive_refs"):
            client.trajectory_writer(num_keep_alive_refs=0)
    finally:
        server.stop()
