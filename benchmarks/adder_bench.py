"""``python benchmarks/adder_bench.py [--agent dqn|r2d2] [--replay-backend B] [--steps N] [--over rpc|shm]``:
one JSON line of the CPU time an adder's ``add`` takes per vector step (CartPole-v1, 16 envs, the
agent's own adder and table, a server in this process; steps of random observations with
episode ends, made before the clock starts). CPU time (``time.process_time``), not wall time:
on a shared machine it hardly moves with the load. ``us_per_vector_step``: the fastest of 7
windows; ``median_us``: their median.

``--over rpc`` (native): the server in a process of its own, served by Shoal's RPC layer as a
distributed run's replay node, the adder writing through its RPC writer (as an actor in its own
process: across hosts); ``--over shm``: the same with shared memory on (one host). The CPU time
is then this process's alone (the writer, the codec and gRPC's client threads), not the
server's. ``server_us_per_vector_step``: the server process's CPU over the same windows."""

from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing as mp
import os
import secrets
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


def _serve(tables: list, token: str, asks: mp.Queue, answers: mp.Queue) -> None:
    """(``--over``) A native replay server of ``tables`` behind Shoal's RPC layer, in this
    process: answers its port, then its CPU seconds at each ask (``None``), until any other ask."""
    from shoal.launch.programs.rpc import RpcServer
    from shoal.replay.native import SERVICE_METHODS, NativeReplayServer

    replay = NativeReplayServer(tables)
    rpc = RpcServer(replay, token=token, methods=SERVICE_METHODS).start()
    answers.put(rpc.port)
    while asks.get(timeout=600) is None:
        answers.put(time.process_time())  # (every thread's: os.times() counts in 10 ms ticks)
    rpc.stop()
    replay.stop()


class _Remote:
    """(``--over``) The server process and a client of it; ``cpu_s()`` its CPU seconds so far."""

    def __init__(self, tables: list, shared_memory: bool) -> None:
        from shoal.launch.programs.rpc import RpcClient
        from shoal.replay.native import NativeReplayClient

        ctx = mp.get_context("spawn")
        token = secrets.token_hex(8)
        self._asks, self._answers = ctx.Queue(), ctx.Queue()
        self._proc = ctx.Process(target=_serve, args=(tables, token, self._asks, self._answers), daemon=True)
        self._proc.start()
        port = self._answers.get(timeout=120)  # (a queue.Empty after 2 minutes: the server never started)
        address = f"127.0.0.1:{port}"
        rpc = RpcClient(address, token=token, timeout_s=120).wait_for_ready(60)
        self.client = NativeReplayClient(rpc, address, shared_memory=shared_memory)
        self.backend = "native"

    def cpu_s(self) -> float:
        self._asks.put(None)
        return self._answers.get(timeout=120)

    def stop(self) -> None:
        self._asks.put("stop")
        self._proc.join(timeout=60)


def adder_cost(agent: str, backend: str | None, window: int, over: str | None = None) -> dict:
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
    server = make_replay_server(free, backend) if over is None else _Remote(free, over == "shm")
    try:
        adder = builder.make_adder(server.client, spec, policy.extras_spec)
        steps = _steps(window * (WINDOWS + 1), extras, np.random.default_rng(0))
        for step in steps[:window]:  # (warm: the window filled, the tables' columns made)
            adder.add(step)
        adder.flush()
        costs, server_costs = [], []
        for w in range(1, WINDOWS + 1):
            served = server.cpu_s() if over else 0.0
            start = time.process_time()
            for step in steps[w * window : (w + 1) * window]:
                adder.add(step)
            if over:
                adder.flush()  # (every item of the window confirmed: the server's work is done)
            costs.append((time.process_time() - start) / window * 1e6)
            if over:
                server_costs.append((server.cpu_s() - served) / window * 1e6)
        adder.close()
    finally:
        server.stop()
    out = {
        "agent": agent,
        "backend": server.backend,
        "over": over or "in_process",
        "num_envs": NUM_ENVS,
        "us_per_vector_step": round(min(costs), 1),
        "median_us": round(sorted(costs)[WINDOWS // 2], 1),
        "load": os.getloadavg()[0],
    }
    if over:
        out["server_us_per_vector_step"] = round(min(server_costs), 1)
        out["server_median_us"] = round(sorted(server_costs)[WINDOWS // 2], 1)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--agent", choices=["dqn", "r2d2"], default="dqn")
    parser.add_argument("--replay-backend", choices=["reverb", "native"], default=None)
    parser.add_argument("--steps", type=int, default=400, help="vector steps per window (7 windows)")
    parser.add_argument(
        "--over", choices=["rpc", "shm"], default=None, help="native: the server in another process (module docstring)"
    )
    args = parser.parse_args()
    if args.over and args.replay_backend == "reverb":
        parser.error("--over measures the native backend's RPC writer; Reverb's writer always streams over gRPC")
    print(json.dumps(adder_cost(args.agent, "native" if args.over else args.replay_backend, args.steps, args.over)))


if __name__ == "__main__":
    main()
