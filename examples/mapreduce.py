"""MapReduce word count (the Launchpad paper's second example).

    python examples/mapreduce.py [--mappers 3 --reducers 2 --lines 2000]

The coordinator splits a text into one chunk per mapper and sends them out concurrently
(RPC futures). Each mapper counts words and partitions the counts by a stable hash of the
word, one partition per reducer; the coordinator routes each partition to its reducer, then
merges the reducers' totals and checks them against a local count.
"""

from __future__ import annotations

import argparse
import collections
import json
import shutil
import tempfile
import zlib

import numpy as np

from shoal.launch import FunctionNode, Program, ServiceNode, launch

VOCABULARY = [
    "actor",
    "learner",
    "replay",
    "shard",
    "device",
    "gradient",
    "reward",
    "policy",
    "value",
    "batch",
    "trajectory",
    "episode",
    "environment",
    "step",
    "update",
    "parameter",
    "server",
    "worker",
]


def make_text(lines: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, len(VOCABULARY) + 1)  # Zipf-like: a few words dominate
    weights /= weights.sum()
    return [" ".join(rng.choice(VOCABULARY, size=rng.integers(3, 12), p=weights)) for _ in range(lines)]


class Mapper:
    def map(self, lines: list, num_partitions: int) -> list:
        counts = collections.Counter(word for line in lines for word in line.split())
        partitions = [{} for _ in range(num_partitions)]
        for word, n in counts.items():
            partitions[zlib.crc32(word.encode()) % num_partitions][word] = n
        return partitions


class Reducer:
    def __init__(self) -> None:
        self.counts: collections.Counter = collections.Counter()

    def reduce(self, partial: dict) -> int:
        self.counts.update(partial)
        return len(self.counts)

    def result(self) -> dict:
        return dict(self.counts)


def coordinator(mappers: list, reducers: list, lines: int) -> dict:
    text = make_text(lines)
    chunks = [text[i :: len(mappers)] for i in range(len(mappers))]
    futures = [m.futures.map(chunk, len(reducers)) for m, chunk in zip(mappers, chunks)]
    for future in futures:
        for reducer, partition in zip(reducers, future.result(timeout=60)):
            reducer.reduce(partition)
    totals: dict = {}
    for reducer in reducers:
        totals.update(reducer.result())  # partitions are disjoint: no word is in two reducers
    expected = collections.Counter(word for line in text for word in line.split())
    top = sorted(totals.items(), key=lambda kv: -kv[1])[:5]
    return {"words": sum(totals.values()), "unique": len(totals), "top": top, "correct": totals == dict(expected)}


def make_program(num_mappers: int, num_reducers: int, lines: int) -> Program:
    program = Program("mapreduce")
    with program.group("mapper"):
        mappers = [program.add_node(ServiceNode(Mapper)) for _ in range(num_mappers)]
    with program.group("reducer"):
        reducers = [program.add_node(ServiceNode(Reducer)) for _ in range(num_reducers)]
    # Lists of handles are dereferenced into lists of clients inside the coordinator's node.
    program.add_node(FunctionNode(coordinator, mappers, reducers, lines), label="coordinator")
    return program


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mappers", type=int, default=3)
    parser.add_argument("--reducers", type=int, default=2)
    parser.add_argument("--lines", type=int, default=2000)
    parser.add_argument("--launcher", default="processes", choices=["processes", "inprocess", "ray"])
    parser.add_argument("--ray-address", default=None, help="Ray cluster to join (default: a local one)")
    args = parser.parse_args()
    run_dir = tempfile.mkdtemp(prefix="shoal-mapreduce-")  # the node logs and the address book
    run = launch(
        make_program(args.mappers, args.reducers, args.lines),
        args.launcher,
        ray_address=args.ray_address,
        run_dir=run_dir,
    )
    results = run.wait(timeout_s=120)
    print(run.summary())
    print(json.dumps(results["coordinator"]))
    shutil.rmtree(run_dir)  # (only once the program ended well: a failure's message points at its logs)
