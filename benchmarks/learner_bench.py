"""The learner fed from Reverb against the same update on a batch already on the devices.

    python benchmarks/learner_bench.py [--seconds 2]     # one JSON object (the devices JAX sees)

For DQN (a uniform table filled once, not rate limited) and PPO (a queue filled with enough
rollouts first): ``fed`` = learner updates/s through the real dataset iterator and device
prefetch (``learner.step()``: sample, update, the host copy of params for actors);
``in_memory`` = the same jitted update applied again and again to one batch on the devices.
``ratio`` = fed / in_memory. (The benchmark reaches into the learner for its jitted update.)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import jax  # noqa: E402

from shoal.actors import EnvironmentLoop, make_vector_env  # noqa: E402
from shoal.agents import get_builder  # noqa: E402
from shoal.core.counting import Counter  # noqa: E402
from shoal.core.specs import make_environment_spec  # noqa: E402
from shoal.replay import ReplayServer  # noqa: E402

AGENTS = {"dqn": {"num_envs": 16, "overrides": {}},
          "ppo": {"num_envs": 8, "overrides": {"queue_capacity": 100_000, "max_policy_lag": 10**9}}}


def _tables(name, builder, spec, policy):
    if name == "dqn":
        from actor_bench import free_table

        return [free_table(builder, spec, policy)]
    return builder.make_replay_tables(spec, policy)


def feed_ratio(name: str, seconds: float) -> dict:
    setting = AGENTS[name]
    builder = get_builder(name, **setting["overrides"])
    env = make_vector_env("CartPole-v1", setting["num_envs"], seed=0)
    spec = make_environment_spec(env)
    networks = builder.make_networks(spec)
    policy = builder.make_policy(networks, spec, evaluation=False)
    server = ReplayServer(_tables(name, builder, spec, policy))
    learner = builder.make_learner(jax.random.PRNGKey(0), networks, builder.make_dataset_iterator(server.client, spec),
                                   None, Counter(), server.client)
    adder = builder.make_adder(server.client, spec, policy)
    loop = EnvironmentLoop(env, builder.make_actor(jax.random.PRNGKey(1), policy, spec, learner, adder,
                                                   asynchronous_updates=False))
    steps_per_update = getattr(builder.config, "rollout_length", 1)

    def fill(updates: int) -> None:
        for _ in range(updates * steps_per_update):
            loop.step()
        adder.flush()

    try:
        fill(max(4, 2000 // steps_per_update))
        learner.step()  # compiles
        jax.block_until_ready(learner._state)
        _, data = next(learner._batches)  # one batch, already on the devices
        state = jax.tree_util.tree_map(jax.numpy.copy, learner._state)  # (the update donates it)
        jax.block_until_ready(state)
        start, n = time.perf_counter(), 0
        while time.perf_counter() - start < seconds:
            state, _ = learner._update(state, data)
            n += 1
        jax.block_until_ready(state)
        in_memory = n / (time.perf_counter() - start)
        updates = max(5, math.ceil(in_memory * seconds))
        if name == "ppo":  # a queue: every update takes its own rollout
            fill(updates + 2)
        start = time.perf_counter()
        for _ in range(updates):
            learner.step()
        jax.block_until_ready(learner._state)
        fed = updates / (time.perf_counter() - start)
    finally:
        adder.close()
        learner.close()
        server.stop()
        env.close()
    return {"fed": round(fed, 1), "in_memory": round(in_memory, 1), "ratio": round(fed / in_memory, 3)}


def feed_ratios(seconds: float) -> dict:
    out = {name: feed_ratio(name, seconds) for name in AGENTS}
    return {"devices": len(jax.local_devices()), "ratio": {k: v["ratio"] for k, v in out.items()},
            "updates_per_s": out}


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=2.0)
    import sys

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    print(json.dumps(feed_ratios(parser.parse_args().seconds)))
