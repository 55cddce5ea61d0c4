"""What DQN's learner sees in a one-process run, per backend: a trace of one ``shoal train`` run.

    python benchmarks/replay_trace.py --backend native --seed 0 [--max-env-steps 8000]

Runs ``shoal train --agent dqn --env CartPole-v1`` in this process with three hooks (a
diagnostic: they wrap the replay client's writer, ``ReplayIterator.__next__`` and the runner's
``LearningActor.update``, so they follow those names):

* every transition the adder writes is hashed (its signature fields) with the insert count then;
* every transition of every batch the learner is served is looked up by that hash: one that is
  not found is a transition replay changed (``unknown``); else its age in inserts at sampling;
* after each ``update`` of the runner that stepped the learner: inserts so far, the table's size,
  items sampled by the table and items consumed by the learner.

Prints one JSON line: transitions written and served, ``unknown``, the first sample's table size,
the mean age over the table size (0.5 for uniform draws), distinct items per batch against the
expectation for uniform draws with replacement, items sampled ahead of the learner (Reverb's
dataset samples ahead; native's gated runner does not), and the achieved samples per insert.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import sys
from typing import Any

import numpy as np

from shoal.launch.experiments import learner_pacing
from shoal.replay import dataset
from shoal.replay.native.client import NativeReplayClient

FIELDS = ("action", "discount", "next_observation", "observation", "reward")  # (tree.flatten's order)


class Trace:
    """Hashes of written transitions, and what the learner was served."""

    def __init__(self) -> None:
        self.written: dict[str, int] = {}
        self.inserts = 0
        self.batches: list[dict[str, Any]] = []
        self.updates: list[dict[str, int]] = []

    @staticmethod
    def digest(columns: list[np.ndarray], row: Any) -> str:
        return hashlib.md5(b"".join(np.ascontiguousarray(np.asarray(c)[row]).tobytes() for c in columns)).hexdigest()

    def wrote(self, columns: list) -> None:
        for env in range(len(columns[0])):
            self.written[self.digest(columns, env)] = self.inserts
        self.inserts += 1

    def served(self, data: dict, keys: np.ndarray) -> None:
        columns = [data[k] for k in FIELDS]  # [batch, sgd_steps, ...] each
        batch, steps = columns[0].shape[:2]
        ages = [self.written.get(self.digest(columns, (b, s))) for b in range(batch) for s in range(steps)]
        found = [self.inserts - a for a in ages if a is not None]
        size = float(np.mean(data["table_size"]))
        keys = np.asarray(keys).reshape(steps, -1)  # [sgd_steps, items per SGD batch]
        self.batches.append(
            {
                "unknown": sum(a is None for a in ages),
                "age": float(np.mean(found)) if found else float("nan"),
                "table_size": size,
                "distinct": float(np.mean([len(set(row.tolist())) for row in keys])),
                "expected_distinct": size * (1 - (1 - 1 / size) ** keys.shape[1]),
            }
        )


class TracedWriter:
    """A replay writer whose one-step items' columns are hashed as they are written."""

    def __init__(self, writer: Any, trace: Trace) -> None:
        self._writer, self._trace = writer, trace
        self._last: list | None = None

    def append(self, columns: list) -> Any:
        self._last = columns
        return self._writer.append(columns)

    def create_item(self, table: str, priority: float, steps: Any) -> None:
        if steps == 1 and self._last is not None:
            self._trace.wrote(self._last)
        self._writer.create_item(table, priority, steps)

    def append_item(self, table: str, priority: float, columns: list) -> None:
        self._trace.wrote(columns)
        self._writer.append_item(table, priority, columns)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._writer, name)


def install(trace: Trace) -> None:
    clients: list[Any] = [NativeReplayClient]
    try:
        from shoal.replay.reverb.client import ReverbClient

        clients.append(ReverbClient)
    except ImportError:
        pass
    for client in clients:
        make = client.writer
        client.writer = lambda self, *a, _make=make, **k: TracedWriter(_make(self, *a, **k), trace)

    next_batch = dataset.ReplayIterator.__next__

    def traced_next(self: Any) -> Any:
        sample = next_batch(self)
        trace.served(sample.data, sample.keys)
        return sample

    dataset.ReplayIterator.__next__ = traced_next
    update = learner_pacing.LearningActor.update

    def traced_update(self: Any, wait: bool = False) -> None:
        before = self._items_consumed
        update(self, wait)
        if self._items_consumed != before:
            info = self._server.client.server_info()[self._table]
            trace.updates.append(
                {
                    "inserts": trace.inserts,
                    "size": int(info.current_size),
                    "sampled": int(self._server.items_sampled(self._table)),
                    "consumed": int(self._items_consumed),
                }
            )

    learner_pacing.LearningActor.update = traced_update


def summary(trace: Trace, backend: str, seed: int, result: dict) -> dict:
    b, u = trace.batches, trace.updates
    ahead = [x["sampled"] - x["consumed"] for x in u]
    return {
        "backend": backend,
        "seed": seed,
        "env_steps": result.get("env_steps"),
        "solved": result.get("solved"),
        "items_written": trace.inserts,
        "batches": len(b),
        "unknown_transitions": sum(x["unknown"] for x in b),
        "first_sample_table_size": b[0]["table_size"] if b else None,
        "age_over_size": round(float(np.nanmean([x["age"] / x["table_size"] for x in b])), 4),
        "distinct_minus_expected": round(float(np.mean([x["distinct"] - x["expected_distinct"] for x in b])), 4),
        "sampled_ahead_items": {"mean": round(float(np.mean(ahead)), 1), "max": int(max(ahead))} if ahead else None,
        "table_behind_adder_items": round(float(np.mean([x["inserts"] - x["size"] for x in u])), 2) if u else None,
        "samples_per_insert_items": round(u[-1]["sampled"] / max(u[-1]["size"] - u[0]["size"] + 1, 1), 2)
        if u
        else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=["native", "reverb"], default="native")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-env-steps", type=int, default=None)
    args = parser.parse_args()
    from shoal.launch.experiments.cli.main import main as shoal  # (the train command, as `shoal train` runs it)

    trace = Trace()
    install(trace)
    argv = [
        "train",
        "--agent",
        "dqn",
        "--env",
        "CartPole-v1",
        "--seed",
        str(args.seed),
        "--replay",
        args.backend,
        "--quiet",
    ]
    argv += ["--max-env-steps", str(args.max_env_steps)] if args.max_env_steps else []
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = shoal(argv)
    if code:
        raise SystemExit(f"replay_trace.py: shoal train ended with exit status {code}")
    result = json.loads(out.getvalue().strip().splitlines()[-1])
    if not trace.inserts:
        raise SystemExit("replay_trace.py: no item was seen written (the adder no longer writes through the hooks)")
    print(json.dumps(summary(trace, args.backend, args.seed, result)))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
