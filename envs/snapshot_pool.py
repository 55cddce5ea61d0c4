"""The snapshot pool of a self-play run (``shoal.envs.selfplay``): frozen copies of the
learner's parameters that the opponents play.

``SnapshotPool`` lives beside the learner: one process's runner, or a distributed run's learner
node, which serves it (``snapshot_versions``, ``snapshot``) to the actor and evaluator nodes.
There a ``PoolMirror`` keeps a copy of it: ``sync()`` asks for the versions the learner's pool
holds and fetches only the snapshots it does not hold yet (parameters as arrays, the RPC
codec's: nothing is unpickled).
"""

from __future__ import annotations

import os
from typing import Any

import jax
import numpy as np


class SnapshotPool:
    """Frozen copies of the learner's parameters: one every ``every`` learner updates (and the
    first, version 0's), the latest ``size`` kept."""

    def __init__(self, size: int = 8, every: int = 20) -> None:
        if size < 1 or every < 1:
            raise ValueError(f"a snapshot pool needs size >= 1 and every >= 1, got size={size}, every={every}")
        self.size, self.every = size, every
        self.snapshots: list[tuple[int, Any]] = []

    @property
    def versions(self) -> list[int]:
        return [version for version, _ in self.snapshots]

    def add(self, version: int, params: Any) -> None:
        # (a new list, not an append: a thread that reads the pool meanwhile sees the old one whole)
        self.snapshots = [*self.snapshots, (int(version), params)][-self.size :]

    def maybe_add(self, source: Any) -> bool:
        """Takes a snapshot of ``source`` (a learner: ``version``, ``get_variables``) if ``every``
        updates passed since the last one (or there is none); returns whether it did."""
        version = int(source.version)
        if self.snapshots and version < self.snapshots[-1][0] + self.every:
            return False
        version, params = source.get_variables()
        self.add(version, jax.tree_util.tree_map(np.asarray, params))
        return True

    def get(self, version: int) -> Any | None:
        """The snapshot of ``version``'s parameters, or ``None`` if the pool holds none."""
        return dict(self.snapshots).get(int(version))

    def sample(self, rng: np.random.Generator) -> tuple[int, Any]:
        """The latest snapshot with probability 1/2, else one drawn uniformly."""
        if rng.random() < 0.5:
            return self.snapshots[-1]
        return self.snapshots[int(rng.integers(len(self.snapshots)))]

    def save(self, path: str) -> None:
        """Writes every snapshot's arrays (``.npz``, no pickles) to ``path``, atomically."""
        arrays: dict[str, np.ndarray] = {"versions": np.asarray(self.versions, np.int64)}
        for i, (_, params) in enumerate(self.snapshots):
            for j, leaf in enumerate(jax.tree_util.tree_leaves(params)):
                arrays[f"s{i}_{j}"] = np.asarray(leaf)
        tmp = f"{path}.tmp"
        with open(tmp, "wb") as f:
            np.savez(f, **arrays)
        os.replace(tmp, path)

    def restore(self, path: str, like: Any) -> None:
        """Reads what ``save`` wrote; ``like``: parameters of the same structure (the learner's)."""
        treedef = jax.tree_util.tree_structure(like)
        with np.load(path, allow_pickle=False) as saved:
            versions = saved["versions"].tolist()[-self.size :]
            skipped = len(saved["versions"]) - len(versions)
            if any(f"s{skipped + i}_{treedef.num_leaves - 1}" not in saved for i in range(len(versions))):
                raise ValueError(
                    f"{path} holds snapshots of other parameters than this run's ({treedef.num_leaves} arrays each)"
                )
            self.snapshots = [
                (
                    int(v),
                    jax.tree_util.tree_unflatten(
                        treedef, [saved[f"s{skipped + i}_{j}"] for j in range(treedef.num_leaves)]
                    ),
                )
                for i, v in enumerate(versions)
            ]


class PoolMirror(SnapshotPool):
    """A copy of a learner node's ``SnapshotPool`` (a distributed run's actors and evaluator):
    ``sync()`` adopts the versions ``source.snapshot_versions()`` names, fetching each new one
    with ``source.snapshot(version)`` (``None``: dropped meanwhile, skipped). Between two syncs
    the opponents play the snapshots of the last."""

    def __init__(self, source: Any) -> None:
        super().__init__(size=10**9, every=1)
        self._source = source

    def sync(self) -> None:
        held = dict(self.snapshots)
        snapshots = []
        for version in self._source.snapshot_versions():
            params = held[version] if version in held else self._source.snapshot(version)
            if params is not None:
                snapshots.append((int(version), params))
        self.snapshots = snapshots  # (one assignment: a game that starts meanwhile samples either list)


__all__ = ["PoolMirror", "SnapshotPool"]
