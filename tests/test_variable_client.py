"""VariableClient pacing, and acting never waiting on a slow variable source."""

import threading
import time

import jax
import numpy as np

from shoal.actors import BatchedActor, VariableClient
from shoal.agents.dqn import DQNConfig, make_networks
from shoal.agents.dqn.learning import init_state, make_policy
from shoal.core.interfaces import VariableSource
from shoal.core.specs import make_environment_spec
from shoal.envs import make_vector_env


class CountingSource(VariableSource):
    """Serves a new version on every call; the first call is instant, later ones take ``delay``."""

    def __init__(self, params, delay: float = 0.0):
        self.params, self.delay, self.calls = params, delay, 0
        self.release = threading.Event()

    def get_variables(self, known_version: int = -1):
        self.calls += 1
        if self.calls > 1 and self.delay:
            self.release.wait(self.delay)
        return self.calls, self.params


def test_update_period_is_respected():
    source = CountingSource({"w": np.zeros(1)})
    client = VariableClient(source, update_period=5, asynchronous=False)
    assert source.calls == 1 and client.version == 1  # the initial, blocking fetch
    for _ in range(4):
        client.update()
    assert source.calls == 1
    client.update()
    assert source.calls == 2 and client.version == 2
    for _ in range(10):
        client.update()
    assert source.calls == 4 and client.version == 4


def test_unchanged_version_is_not_replaced():
    class Fixed(VariableSource):
        def get_variables(self, known_version=-1):
            return 7, (None if known_version == 7 else {"w": np.ones(1)})

    client = VariableClient(Fixed(), update_period=1, asynchronous=False)
    params = client.params
    client.update()
    assert client.version == 7 and client.params is params


def test_select_action_never_blocks_on_slow_source():
    env = make_vector_env("CartPole-v1", 4, seed=0)
    spec = make_environment_spec(env)
    config = DQNConfig(hidden_sizes=(16,))
    networks = make_networks(spec, config.hidden_sizes)
    params = init_state(jax.random.PRNGKey(0), networks.q_network, spec.observation_shape, config).params
    source = CountingSource(params, delay=30.0)  # every fetch after the first hangs for 30 s
    client = VariableClient(source, update_period=1, asynchronous=True)
    actor = BatchedActor(make_policy(networks.q_network, 2, config, False), jax.random.PRNGKey(1), client, num_envs=4)
    obs, _ = env.reset(seed=0)
    actor.select_action(obs)  # compile outside the timed part
    start = time.monotonic()
    for _ in range(200):
        action, _ = actor.select_action(obs)
        obs, *_ = env.step(action)
        actor.update()
    elapsed = time.monotonic() - start
    source.release.set()
    client.close()
    assert elapsed < 5.0, f"acting took {elapsed:.1f}s: it waited on the variable source"
    assert source.calls == 2  # one request in flight at a time: bounded, not piling up
    assert client.version == 1
