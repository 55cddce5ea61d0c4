"""get_variables latency over loopback gRPC: prints one JSON object.

    python benchmarks/rpc.py [--params 1000000 --calls 200]

A server process serves a learner-like ``get_variables`` returning ``--params`` float32
parameters (in 4 arrays, like an MLP's weights). Clients in this process (each with its own
channel, on threads) call it with ``known_version=-1`` so every reply carries the full
parameters. Reports p50/p99 latency in ms for 1 and for 32 concurrent clients, over gRPC
and through shared memory (the path actors on the learner's host take: the server process
publishes the parameters once, clients read them with ``LocalFirstSource``).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import threading
import time

import numpy as np

from shoal.core.files import json_text


class ParamsService:
    def __init__(self, num_params: int) -> None:
        sizes = [num_params // 2, num_params // 4, num_params // 8]
        sizes.append(num_params - sum(sizes))
        rng = np.random.default_rng(0)
        self.params = {f"layer{i}": rng.normal(size=n).astype(np.float32) for i, n in enumerate(sizes)}

        self.location = None

    def get_variables(self, known_version: int = -1):
        return (1, None) if known_version == 1 else (1, self.params)

    def shared_params(self):
        return self.location


def serve(num_params: int, conn) -> None:
    from shoal.core.shared_memory import SharedValuePublisher
    from shoal.launch.programs.rpc import RpcServer

    service = ParamsService(num_params)
    publisher = SharedValuePublisher("bench", 2 * 4 * num_params + 65536)
    publisher.publish(1, service.params)
    service.location = publisher.location()
    server = RpcServer(service, max_workers=32).start()
    conn.send(server.address)
    conn.recv()  # until told to stop
    server.stop()
    publisher.close()


def measure(address: str, num_clients: int, calls: int, shared: bool = False) -> dict:
    from shoal.launch.experiments.distributed.shared_params import LocalFirstSource
    from shoal.launch.programs.rpc import RpcClient

    rpc = [RpcClient(address).wait_for_ready(30) for _ in range(num_clients)]
    clients = [LocalFirstSource(c) for c in rpc] if shared else rpc
    assert not shared or all(c.local for c in clients), "the shared-memory segment is not readable here"
    for c in clients:
        c.get_variables(-1)  # warm-up
    latencies: list[list[float]] = [[] for _ in clients]
    barrier = threading.Barrier(num_clients)

    def work(i: int) -> None:
        barrier.wait()
        for _ in range(calls):
            t0 = time.perf_counter()
            version, params = clients[i].get_variables(-1)
            latencies[i].append(time.perf_counter() - t0)
            assert version == 1 and params is not None

    start = time.perf_counter()
    threads = [threading.Thread(target=work, args=(i,)) for i in range(num_clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    all_ms = np.array([x for per in latencies for x in per]) * 1e3
    for c in rpc:
        c.close()
    return {
        "clients": num_clients,
        "path": "shared_memory" if shared else "grpc",
        "calls": int(all_ms.size),
        "p50_ms": float(np.percentile(all_ms, 50)),
        "p99_ms": float(np.percentile(all_ms, 99)),
        "calls_per_s": all_ms.size / elapsed,
        "calls_MB_per_s": all_ms.size / elapsed,
    }


def measure_latencies(num_params: int, calls: int) -> list[dict]:
    """Latencies of 1 client (``calls`` calls) and of 32 concurrent clients (``calls // 8`` each)
    against a server process serving ``num_params`` float32 params: over gRPC, then through
    shared memory."""
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=serve, args=(num_params, child), daemon=True)
    proc.start()
    try:
        if not parent.poll(120):
            raise TimeoutError("the RPC server process did not start within 120 s")
        address = parent.recv()
        results = [
            measure(address, 1, calls),
            measure(address, 32, max(calls // 8, 10)),
            measure(address, 1, calls, shared=True),
            measure(address, 32, max(calls // 8, 10), shared=True),
        ]
    finally:
        parent.send("stop")
        proc.join(10)
    for r in results:
        r["throughput_MB_per_s"] = r.pop("calls_MB_per_s") * num_params * 4e-6
    return results


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--params", type=int, default=1_000_000)
    parser.add_argument("--calls", type=int, default=200, help="calls per client")
    args = parser.parse_args()
    results = measure_latencies(args.params, args.calls)
    print(
        json_text(
            {
                "benchmark": "rpc_get_variables",
                "params": args.params,
                "payload_MB": args.params * 4 / 1e6,
                "results": results,
            }
        )
    )


if __name__ == "__main__":
    main()
