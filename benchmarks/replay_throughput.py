"""Replay insert and sample throughput, Reverb beside native: prints one JSON object.

    python benchmarks/replay_throughput.py [--quick] [--backends reverb,native] [--out FILE]
    python benchmarks/replay_throughput.py --in-process [--quick] [--backends ...] [--out FILE]
    python benchmarks/replay_throughput.py --sample-one-host [--quick] [--backends ...] [--out FILE]

For each backend this Python has (Reverb: Python 3.11), a server in this process (Reverb's
gRPC server; native: ``NativeReplayServer`` behind Shoal's RPC layer on loopback with a token,
as a distributed run serves it) and writer / sampler *processes* (as actors and a learner are):

* ``insert``: 1, 4 and 16 writer processes, each writing items through the backend's writer
  (``client.writer``, what the adders use: one item per vector step in one ``append_item`` call,
  and ``flush(block_until_num_items=8)`` every 8 items, as the n-step adder does) for the window:
  items/s, env steps/s (16 or 8 transitions an item) and MB/s over all writers, and the CPU
  time per item of the writer processes and of this (the server's) process, which hardly moves
  with the machine's load (native: through shared memory, as on one host a distributed run's
  nodes write; ``SHOAL_REPLAY_VIA=rpc`` for RPC alone, as across hosts);
* ``sample``: one sampler process reading batches of 32 items as a learner's dataset does
  (``transition_batches``' iterator) from a filled table: items/s and MB/s.

Items come in two sizes: ``cartpole`` (one vector step of 16 CartPole envs as an n-step
transition: ~700 B) and ``atari`` (8 envs of 4x84x84 uint8 frames, observation and next
observation: ~450 KB). The table never blocks (no rate limiting) and holds 2,000 items.
``--sizes cartpole --writers 1`` measures one part alone.

``--sample-one-host``: a table of 500,000 CartPole transitions (31,250 vector-step items of 16
envs) served by this process as ``insert`` serves it, filled in this process, and one sampler
*process* reading batches of 256 transitions (``transition_batches``, 16 items a batch; native:
through shared memory, or RPC alone with ``SHOAL_REPLAY_VIA=rpc``) for the window. Its JSON has,
per backend, ``sample_one_host``: ``items_per_s`` (transitions), ``batches_per_s``, the CPU time
per transition of the sampler process and of this (the server's) process, and the 1-minute load.

``--in-process``: the server, writer and sampler in this one process (what a one-process run
does; no socket, no second process), on CartPole transitions written as the n-step adder writes
them (one item per vector step of 16 envs, ``[16, ...]`` per field). Its JSON has, per backend,
``in_process.insert.steps_per_s`` (env transitions per second, 16 per ``append_item`` call: the
n-step adder's write, as the writer processes above write; ``append_create_commit_steps_per_s``
the same written as ``append``, ``create_item(1)`` and ``commit``, the figure's path before
2026-11-29) and ``in_process.sample.{uniform,prioritized}.items_per_s`` (transitions per second in
batches of 256 -- 16 vector-step items -- from a full table of 500,000 transitions; the
prioritized table takes one priority update of the batch's items after each batch, as DQN's
learner sends them), and ``in_process.memory``: the process's resident memory grown by filling
the table, per transition, beside a transition's raw bytes.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import secrets
import sys
import time

import numpy as np
import psutil

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

SIZES = {"cartpole": (16, (4,), "float32"), "atari": (8, (4, 84, 84), "uint8")}


def _signature(size: str) -> dict:
    import numpy as np

    from shoal.core.specs import ArraySpec

    envs, shape, dtype = SIZES[size]
    obs = ArraySpec((envs, *shape), np.dtype(dtype))
    scalar = ArraySpec((envs,), np.float32)
    return {
        "observation": obs,
        "action": ArraySpec((envs,), np.int32),
        "reward": scalar,
        "discount": scalar,
        "next_observation": obs,
    }


def _item(size: str, seed: int) -> list:
    import numpy as np
    import tree

    rng = np.random.default_rng(seed)
    return [(rng.random(s.shape) * 200).astype(s.dtype) for s in tree.flatten(_signature(size))]


def _table(size: str, max_size: int = 2000):
    from shoal.replay import RateLimit, TableSpec

    return TableSpec(
        "t",
        sampler="uniform",
        remover="fifo",
        max_size=max_size,
        rate_limit=RateLimit(1.0, 1, -1e300, 1e300),
        signature=_signature(size),
    )


def client_of(backend: str, address: str, token: str | None):
    """A client, in another process, of the server ``serve`` made."""
    if backend == "native":
        from shoal.launch.programs.rpc import RpcClient
        from shoal.replay.native import NativeReplayClient

        # (as a distributed run's nodes make it: shared memory with a server on this host)
        return NativeReplayClient(
            RpcClient(address, token=token, timeout_s=120),
            address,
            shared_memory=os.environ.get("SHOAL_REPLAY_VIA") != "rpc",
        )
    from shoal.replay import make_replay_client

    return make_replay_client(address)


def _writer(backend, address, token, size, start, stop, counts, cpu, index) -> None:
    client = client_of(backend, address, token)
    writer = client.writer(1, timeout_s=120)
    columns = _item(size, index)
    n = 0
    start.wait()
    began = time.process_time()
    while not stop.is_set():  # (a multiprocessing Event: a lock round, read once per 8 items)
        for _ in range(8):
            writer.append_item("t", 1.0, columns)  # (as the n-step adder writes a vector step)
        n += 8
        writer.flush(
            block_until_num_items=8
        )  # (as the n-step adder does: at most 8 items pending, or what the writer allows)
        counts[index] = n
        cpu[index] = time.process_time() - began
    writer.flush()
    counts[index] = n
    writer.close()


def _sampler(backend, address, token, size, start, stop, counts) -> None:
    from shoal.replay import transition_batches

    client = client_of(backend, address, token)
    envs = SIZES[size][0]
    dataset = transition_batches(client if backend == "native" else address, "t", num_envs=envs, batch_size=32 * envs)
    next(dataset)  # (opens the dataset: TensorFlow's import on Reverb)
    start.wait()
    n = 0
    while not stop.is_set():
        next(dataset)
        n += 32
        counts[0] = n
    dataset.close()


def _serve(backend: str, size: str, max_size: int = 2000):
    """(server, address, token, stop())."""
    return serve(backend, [_table(size, max_size)])


def serve(backend: str, tables: list):
    """``(server, address, token, stop())``: a server of ``tables`` in this process that other
    processes reach (``client_of``): native behind Shoal's RPC with a token, or Reverb's."""
    if backend == "native":
        from shoal.launch.programs.rpc import RpcServer
        from shoal.replay.native import SERVICE_METHODS, NativeReplayServer

        replay = NativeReplayServer(tables)
        token = secrets.token_hex(16)
        rpc = RpcServer(replay, token=token, methods=SERVICE_METHODS, max_workers=64).start()
        return replay, rpc.address, token, lambda: (replay.stop(), rpc.stop())
    from shoal.replay import ReverbServer

    server = ReverbServer(tables)
    return server, server.address, None, server.stop


def _cpu_s() -> float:
    """This process's CPU time (every thread's: the server's)."""
    times = psutil.Process().cpu_times()
    return times.user + times.system


def measure(backend: str, size: str, writers: int, window_s: float) -> dict:
    ctx = mp.get_context("spawn")
    server, address, token, stop_server = _serve(backend, size)
    item_bytes = sum(c.nbytes for c in _item(size, 0))
    try:
        out = {}
        start, stop = ctx.Event(), ctx.Event()
        counts, cpu = ctx.Array("q", writers), ctx.Array("d", writers)
        procs = [
            ctx.Process(target=_writer, args=(backend, address, token, size, start, stop, counts, cpu, i))
            for i in range(writers)
        ]
        for p in procs:
            p.start()
        time.sleep(2.0 + 0.5 * writers)  # (the writers import and connect before the window)
        server_cpu = _cpu_s()
        start.set()
        begin = sum(counts)
        time.sleep(window_s)
        written, cpu_s = sum(counts), sum(cpu)  # (the writers' CPU since the start, for these items)
        items = written - begin
        server_cpu = _cpu_s() - server_cpu
        stop.set()
        for p in procs:
            p.join(timeout=120)
        out["insert_items_per_s"] = round(items / window_s)
        out["insert_steps_per_s"] = round(items * SIZES[size][0] / window_s)
        out["insert_mb_per_s"] = round(items * item_bytes / window_s / 1e6, 2)
        out["insert_writer_cpu_us_per_item"] = round(cpu_s / max(written, 1) * 1e6, 1)
        out["insert_server_cpu_us_per_item"] = round(server_cpu / max(items, 1) * 1e6, 1)
        if writers == 1:  # the table is full now: sample it
            start, stop = ctx.Event(), ctx.Event()
            counts = ctx.Array("q", 1)
            proc = ctx.Process(target=_sampler, args=(backend, address, token, size, start, stop, counts))
            proc.start()
            while counts[0] == 0 and proc.is_alive():
                start.set()
                time.sleep(0.1)
            begin = counts[0]
            time.sleep(window_s)
            items = counts[0] - begin
            stop.set()
            proc.join(timeout=120)
            out["sample_items_per_s"] = round(items / window_s)
            out["sample_mb_per_s"] = round(items * item_bytes / window_s / 1e6, 2)
        return out
    finally:
        stop_server()


IN_PROCESS_ENVS, IN_PROCESS_TRANSITIONS, IN_PROCESS_BATCH = 16, 500_000, 256


def _in_process_server(backend: str, sampler: str, max_items: int):
    """(client, stop()) of a server in this process with one table ``t`` of ``max_items`` items."""
    from shoal.replay import RateLimit, TableSpec

    spec = TableSpec(
        "t",
        sampler=sampler,
        remover="fifo",
        max_size=max_items,
        priority_exponent=0.6,
        rate_limit=RateLimit(1.0, 1, -1e300, 1e300),
        signature=_signature("cartpole"),
    )
    if backend == "native":
        from shoal.replay.native import NativeReplayServer

        server = NativeReplayServer([spec], seed=0)
        return server.client, server.stop
    from shoal.replay import ReverbServer, make_replay_client

    server = ReverbServer([spec])
    return make_replay_client(server.address), server.stop


def _fill(writer, columns: list, items: int, window_s: float | None = None, steps: bool = False) -> tuple[int, float]:
    """Writes ``items`` vector-step items (or as many as fit in ``window_s``) with ``append_item``
    (``steps``: ``append``, ``create_item`` and ``commit``): (items, seconds)."""
    begin, n = time.perf_counter(), 0
    while n < items:
        if steps:
            writer.append(columns)
            writer.create_item("t", 1.0, 1)
            writer.commit()
        else:
            writer.append_item("t", 1.0, columns)
        n += 1
        if window_s is not None and n % 256 == 0 and time.perf_counter() - begin > window_s:
            break
    writer.flush()
    return n, time.perf_counter() - begin


def measure_in_process(backend: str, window_s: float) -> dict:
    """``in_process`` figures of ``backend`` (module docstring)."""
    from shoal.replay import transition_batches

    columns = _item("cartpole", 0)
    max_items = IN_PROCESS_TRANSITIONS // IN_PROCESS_ENVS
    out: dict = {
        "transitions_per_item": IN_PROCESS_ENVS,
        "table_transitions": max_items * IN_PROCESS_ENVS,
        "batch_transitions": IN_PROCESS_BATCH,
        "sample": {},
    }
    for sampler in ("uniform", "prioritized"):
        client, stop = _in_process_server(backend, sampler, max_items)
        try:
            writer = client.writer(1, timeout_s=120)
            if sampler == "uniform":  # the insert rate: into the empty table, for the window
                rss = psutil.Process().memory_info().rss
                n, seconds = _fill(writer, columns, max_items, window_s)
                out["insert"] = {"steps_per_s": round(n * IN_PROCESS_ENVS / seconds), "items_per_s": round(n / seconds)}
                m, other_s = _fill(writer, columns, max_items, window_s, steps=True)
                out["insert"]["append_create_commit_steps_per_s"] = round(m * IN_PROCESS_ENVS / other_s)
                n += m
                _fill(writer, columns, max_items - n)
                grown = psutil.Process().memory_info().rss - rss
                raw = sum(c.nbytes for c in columns) / IN_PROCESS_ENVS
                out["memory"] = {
                    "raw_bytes_per_transition": raw,
                    "rss_bytes_per_transition": round(grown / (max_items * IN_PROCESS_ENVS), 1),
                    "rss_over_raw": round(grown / (max_items * IN_PROCESS_ENVS) / raw, 2),
                }
            else:
                _fill(writer, columns, max_items)
            dataset = transition_batches(
                client if backend == "native" else client.server_address,
                "t",
                num_envs=IN_PROCESS_ENVS,
                batch_size=IN_PROCESS_BATCH,
            )
            batch = next(dataset)  # (opens the dataset: TensorFlow's import on Reverb)
            keys = np.asarray(batch.keys).reshape(-1)
            begin, batches = time.perf_counter(), 0
            while time.perf_counter() - begin < window_s:
                batch = next(dataset)
                if sampler == "prioritized":
                    keys = np.asarray(batch.keys).reshape(-1)
                    client.mutate_priorities("t", {int(k): 0.5 + (i % 7) for i, k in enumerate(keys.tolist())})
                batches += 1
            seconds = time.perf_counter() - begin
            dataset.close()
            writer.close()
            out["sample"][sampler] = {
                "items_per_s": round(batches * IN_PROCESS_BATCH / seconds),
                "batches_per_s": round(batches / seconds, 1),
            }
        finally:
            stop()
    return out


def _one_host_sampler(backend, address, token, start, stop, counts, cpu) -> None:
    from shoal.replay import transition_batches

    client = client_of(backend, address, token)
    dataset = transition_batches(
        client if backend == "native" else address, "t", num_envs=IN_PROCESS_ENVS, batch_size=IN_PROCESS_BATCH
    )
    next(dataset)  # (opens the dataset and its shared-memory segment; TensorFlow's import on Reverb)
    start.wait()
    began, n = time.process_time(), 0
    while not stop.is_set():  # (a multiprocessing Event: a lock round, read once per 8 batches)
        for _ in range(8):
            next(dataset)
        n += 8 * IN_PROCESS_BATCH
        counts[0] = n
        cpu[0] = time.process_time() - began
    dataset.close()


def measure_sample_one_host(backend: str, window_s: float) -> dict:
    """``sample_one_host`` figures of ``backend`` (module docstring)."""
    ctx = mp.get_context("spawn")
    max_items = IN_PROCESS_TRANSITIONS // IN_PROCESS_ENVS
    server, address, token, stop_server = _serve(backend, "cartpole", max_items)
    try:
        if backend == "native":
            client = server.client
        else:
            from shoal.replay import make_replay_client

            client = make_replay_client(address)
        writer = client.writer(1, timeout_s=120)
        _fill(writer, _item("cartpole", 0), max_items)
        writer.close()
        start, stop = ctx.Event(), ctx.Event()
        counts, cpu = ctx.Array("q", 1), ctx.Array("d", 1)
        proc = ctx.Process(target=_one_host_sampler, args=(backend, address, token, start, stop, counts, cpu))
        proc.start()
        start.set()
        while counts[0] == 0 and proc.is_alive():  # (its first 8 batches: connected, segment mapped)
            time.sleep(0.05)
        begin, cpu_begin, server_cpu, wall = counts[0], cpu[0], _cpu_s(), time.perf_counter()
        time.sleep(window_s)
        items, sampler_cpu = counts[0] - begin, cpu[0] - cpu_begin
        seconds, server_cpu = time.perf_counter() - wall, _cpu_s() - server_cpu
        stop.set()
        proc.join(timeout=120)
        return {
            "via": "grpc" if backend == "reverb" else ("rpc" if os.environ.get("SHOAL_REPLAY_VIA") == "rpc" else "shm"),
            "table_transitions": max_items * IN_PROCESS_ENVS,
            "batch_transitions": IN_PROCESS_BATCH,
            "items_per_s": round(items / seconds),
            "batches_per_s": round(items / IN_PROCESS_BATCH / seconds, 1),
            "sampler_cpu_us_per_item": round(sampler_cpu / max(items, 1) * 1e6, 3),
            "server_cpu_us_per_item": round(server_cpu / max(items, 1) * 1e6, 3),
            "load_avg_1m": round(os.getloadavg()[0], 2),
        }
    finally:
        stop_server()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="2 s windows instead of 5 s")
    parser.add_argument("--backends", default=None, help="comma-separated (default: every installed one)")
    parser.add_argument("--out", default=None, help="also write the JSON here")
    parser.add_argument("--sizes", default=",".join(SIZES), help="comma-separated item sizes (cartpole, atari)")
    parser.add_argument("--writers", default="1,4,16", help="comma-separated writer process counts")
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="server, writer and sampler in this process, batches of 256 from 500,000 transitions",
    )
    parser.add_argument(
        "--sample-one-host",
        action="store_true",
        help="a sampler process reads batches of 256 from 500,000 transitions served by this process",
    )
    args = parser.parse_args()
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from shoal.replay import reverb_installed

    backends = args.backends.split(",") if args.backends else ["native"] + (["reverb"] if reverb_installed() else [])
    window = 2.0 if args.quick else 5.0
    result = {"python": sys.version.split()[0], "window_s": window}
    for backend in backends if args.in_process else ():
        result[backend] = {"in_process": measure_in_process(backend, window)}
        print(json.dumps({backend: result[backend]}), file=sys.stderr, flush=True)
    for backend in backends if args.sample_one_host else ():
        result.setdefault(backend, {})["sample_one_host"] = measure_sample_one_host(backend, window)
        print(json.dumps({backend: result[backend]}), file=sys.stderr, flush=True)
    for backend in () if args.in_process or args.sample_one_host else backends:
        for size in args.sizes.split(","):
            for writers in map(int, args.writers.split(",")):
                result[f"{backend}/{size}/{writers}_writers"] = measure(backend, size, writers, window)
                print(
                    json.dumps({f"{backend}/{size}/{writers}_writers": result[f"{backend}/{size}/{writers}_writers"]}),
                    file=sys.stderr,
                    flush=True,
                )
    text = json.dumps(result)
    print(text)
    if args.out:
        from shoal.core.files import json_text, write_output

        write_output(args.out, json_text(result))


if __name__ == "__main__":
    main()
