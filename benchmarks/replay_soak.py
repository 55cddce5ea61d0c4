"""Does a full native replay table stay the same size? A soak of the replay process's memory.

    python benchmarks/replay_soak.py [--seconds 600] [--max-size 200000] [--out FILE]

A native replay server (this process: its RPC service and one uniform FIFO table of
``--max-size`` CartPole transition items, 16 envs per item as an actor writes them) is fed by
one writer process flat out and read by one sampler process (batches of 32 vector steps), both
over shared memory as a distributed run's nodes on this host are. Once the table is full every
insert removes the oldest item, so the process's resident memory should stop growing there.

The JSON (stdout, and ``--out``): the RSS (MiB) when the table first filled, its maximum and
its last value after that, ``growth_after_fill_mib`` (last minus at-fill) and
``growth_after_first_minute_mib`` (last minus a minute after filling: the thread pools, the
sampler's buffers and the allocator's arenas have grown to their size by then) with a per-minute
series of samples, the items inserted and sampled, and the raw bytes of the table's contents.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import secrets
import sys
import time

import psutil

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from replay_throughput import SIZES, _client, _item, _signature  # noqa: E402

SIZE = "cartpole"


def _writer(address: str, token: str, start, stop, count) -> None:
    client = _client("native", address, token)
    writer = client.writer(1, timeout_s=120)
    columns = _item(SIZE, 0)
    n = 0
    start.wait()
    while not stop.is_set():
        writer.append(columns)
        writer.create_item("t", 1.0, 1)
        writer.commit()
        n += 1
        if n % 8 == 0:
            writer.flush(block_until_num_items=8)
            count.value = n
    writer.flush()
    count.value = n
    writer.close()


def _sampler(address: str, token: str, start, stop, count) -> None:
    from shoal.replay import transition_batches

    client = _client("native", address, token)
    envs = SIZES[SIZE][0]
    dataset = transition_batches(client, "t", num_envs=envs, batch_size=32 * envs)
    start.wait()
    n = 0
    while not stop.is_set():
        next(dataset)
        n += 32
        count.value = n
    dataset.close()


def soak(seconds: float, max_size: int) -> dict:
    from shoal.launch.programs.rpc import RpcServer
    from shoal.replay import RateLimit, TableSpec
    from shoal.replay.native import SERVICE_METHODS, NativeReplayServer

    table = TableSpec(
        "t",
        sampler="uniform",
        remover="fifo",
        max_size=max_size,
        rate_limit=RateLimit(1.0, 1, -1e300, 1e300),
        signature=_signature(SIZE),
    )
    replay = NativeReplayServer([table])
    token = secrets.token_hex(16)
    rpc = RpcServer(replay, token=token, methods=SERVICE_METHODS, max_workers=64).start()
    me = psutil.Process()
    ctx = mp.get_context("spawn")
    start, stop = ctx.Event(), ctx.Event()
    written, sampled = ctx.Value("q", 0), ctx.Value("q", 0)
    procs = [
        ctx.Process(target=_writer, args=(rpc.address, token, start, stop, written)),
        ctx.Process(target=_sampler, args=(rpc.address, token, start, stop, sampled)),
    ]
    try:
        for p in procs:
            p.start()
        start.set()
        began = time.monotonic()
        deadline = began + seconds + 600  # (filling is part of the soak's first minutes)
        while written.value < max_size:
            if time.monotonic() > deadline or not procs[0].is_alive():
                raise RuntimeError(f"the table did not fill: {written.value} of {max_size} items written")
            time.sleep(0.5)
        filled_s = time.monotonic() - began
        at_fill = me.memory_info().rss
        series, peak, end = [], at_fill, time.monotonic() + seconds
        next_mark = time.monotonic()
        while time.monotonic() < end:
            if not all(p.is_alive() for p in procs):
                raise RuntimeError("a writer or sampler process died during the soak")
            rss = me.memory_info().rss
            peak = max(peak, rss)
            if time.monotonic() >= next_mark:
                series.append(round(rss / 2**20, 1))
                next_mark += 60
            time.sleep(1.0)
        last = me.memory_info().rss
        item_bytes = sum(c.nbytes for c in _item(SIZE, 0))
        return {
            "seconds_after_fill": seconds,
            "max_size_items": max_size,
            "filled_after_s": round(filled_s, 1),
            "rss_at_fill_mib": round(at_fill / 2**20, 1),
            "rss_max_mib": round(peak / 2**20, 1),
            "rss_last_mib": round(last / 2**20, 1),
            "growth_after_fill_mib": round((last - at_fill) / 2**20, 1),
            "growth_after_first_minute_mib": round(last / 2**20 - series[min(1, len(series) - 1)], 1),
            "rss_per_minute_mib": series,
            "items_written": written.value,
            "items_sampled": sampled.value,
            "table_raw_mib": round(max_size * item_bytes / 2**20, 1),
        }
    finally:
        stop.set()
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()
        replay.stop()
        rpc.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=600.0, help="how long to soak after the table fills")
    parser.add_argument("--max-size", type=int, default=200_000, help="the table's max_size in items")
    parser.add_argument("--out", default=None, help="also write the JSON here")
    args = parser.parse_args()
    if args.seconds <= 0 or args.max_size < 1:
        parser.error(f"--seconds must be > 0 and --max-size >= 1 (got {args.seconds}, {args.max_size})")
    from shoal.core.files import json_text, write_output

    out = {"native": soak(args.seconds, args.max_size)}
    print(json_text(out, "the results"), flush=True)
    if args.out:
        write_output(args.out, json_text(out, args.out, indent=2))


if __name__ == "__main__":
    main()
