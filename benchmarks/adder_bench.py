"""``python benchmarks/adder_bench.py [--agent dqn|r2d2] [--replay-backend B] [--steps N]``: one
JSON line of the CPU time an adder's ``add`` takes per vector step (CartPole-v1, 16 envs, the
agent's own adder and table, a server in this process; steps of random observations with
episode ends, made before the clock starts). CPU time (``time.process_time``), not wall time:
on a shared machine it hardly moves with the load. ``us_per_vector_step``: the fastest of 7
windows; ``median_us``: their median."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time

import numpy as np

from shoal.agents import get_builder
from shoal.core.specs import make_environment_spec
from shoal.core.types import Step
from shoal.envs import make_vector_env
from shoal.replay import make_replay_server

NUM_ENVS = 16
WINDOWS = 7


def _steps(count: int, extras_spec: dict, rng: np.random.Generator) -> list[Step]:
    """Vector steps of random CartPole-shaped data, about one episode end per 40 env steps."""
    steps, obs = [], rng.standard_normal((NUM_ENVS, 4)).astype(np.float32)
    for _ in range(count):
        nxt = rng.standard_normal((NUM_ENVS, 4)).astype(np.float32)
        extras = {k: rng.standard_normal((NUM_ENVS, *s.shape)).astype(s.dtype) for k, s in extras_spec.items()}
        ends = rng.random(NUM_ENVS)
        steps.append(
            Step(
                obs, rng.integers(0, 2, NUM_ENVS), np.ones(NUM_ENVS, np.float32), ends < 0.02, ends > 0.995, nxt, extras
            )
        )
        obs = nxt
    return steps


def adder_cost(agent: str, backend: str | None, window: int) -> dict:
    """CPU µs per ``add`` of ``agent``'s adder (module docstring)."""
    env = make_vector_env("CartPole-v1", NUM_ENVS, seed=0)
    spec = make_environment_spec(env)
    env.close()
    builder = get_builder(agent)
    policy = builder.make_policy(builder.make_networks(spec), spec, evaluation=False)
    extras = dict(policy.extras_spec or {})
    free = [  # (no rate limiting: the adder never waits for a learner)
        dataclasses.replace(t, rate_limit=dataclasses.replace(t.rate_limit, min_diff=-1e12, max_diff=1e12))
        for t in builder.make_replay_tables(spec, policy.extras_spec)
    ]
    server = make_replay_server(free, backend)
    try:
        adder = builder.make_adder(server.client, spec, policy.extras_spec)
        steps = _steps(window * (WINDOWS + 1), extras, np.random.default_rng(0))
        for step in steps[:window]:  # (warm: the window filled, the tables' columns made)
            adder.add(step)
        costs = []
        for w in range(1, WINDOWS + 1):
            start = time.process_time()
            for step in steps[w * window : (w + 1) * window]:
                adder.add(step)
            costs.append((time.process_time() - start) / window * 1e6)
        adder.close()
    finally:
        server.stop()
    return {
        "agent": agent,
        "backend": server.backend,
        "num_envs": NUM_ENVS,
        "us_per_vector_step": round(min(costs), 1),
        "median_us": round(sorted(costs)[WINDOWS // 2], 1),
        "load": os.getloadavg()[0],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--agent", choices=["dqn", "r2d2"], default="dqn")
    parser.add_argument("--replay-backend", choices=["reverb", "native"], default=None)
    parser.add_argument("--steps", type=int, default=400, help="vector steps per window (7 windows)")
    args = parser.parse_args()
    print(json.dumps(adder_cost(args.agent, args.replay_backend, args.steps)))


if __name__ == "__main__":
    main()
