"""The learner's checks of its updates' metrics, which never make an update wait.

``InFlightUpdates`` keeps the updates dispatched but not checked yet, each with the flag its
update computed (every metric finite), and checks them in groups, oldest first: once ``2 *
group`` updates are unchecked, the oldest ``group`` flags are read from the devices in one read
(it waits for the oldest updates only: ``group`` newer ones stay in flight). On a GPU a read per
update cost as much as a small update itself (an H200: ~0.3 ms each). A NaN or infinite metric
is a ``FloatingPointError`` naming the update and the statistics of its batch
(``batch_statistics``). ``check_metric_shapes``: an update's metrics are scalars.

Each update also keeps what it was given to donate (``donated``: the state arrays it took over)
until it is checked: on a CPU, dropping a donated array's last reference waits for the update
that took it over to finish (jaxlib 0.4.34's CPU buffers: their delete waits on the update), so
a learner that let go of them at once would wait for every update as it dispatched the next
(measured: DQN's fed learner at 0.65-0.73 of its update's rate on CartPole, 2 cores).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np

from shoal.core.types import Sample


class InFlightUpdates:
    """The updates not checked yet, oldest first, checked ``group`` at a time."""

    def __init__(self, group: int = 4) -> None:
        self._group = group
        self._updates: deque = deque()  # (version, SGD steps by then, finite, metrics, host sample, donated)

    def __len__(self) -> int:
        return len(self._updates)

    def add(
        self,
        version: int,
        sgd_steps: float,
        finite: jax.Array,
        metrics: Mapping[str, jax.Array],
        sample: Sample,
        donated: Any = None,
    ) -> None:
        """An update just dispatched: ``finite`` is its flag, ``sample`` the batch it was given,
        ``donated`` the arrays it took over (let go of once it is checked: it has finished)."""
        self._updates.append((version, sgd_steps, finite, metrics, sample, donated))

    def check_finished(self) -> None:
        """The NaN check of the oldest ``group`` updates once ``2 * group`` are unchecked (waits
        for those to finish: the host is then that far ahead of the devices)."""
        if len(self._updates) >= 2 * self._group:
            self._check(self._group)

    def check_all(self) -> None:
        """The NaN check of every update, waiting for the ones still running."""
        self._check(len(self._updates))

    def _check(self, n: int) -> None:
        taken = [self._updates.popleft() for _ in range(n)]
        flags = jax.device_get([update[2] for update in taken])  # (one read for them all)
        for (version, sgd_steps, _, metrics, sample, _), ok in zip(taken, flags):
            if not ok:
                self._updates.clear()
                values = {k: float(v) for k, v in jax.device_get(dict(metrics)).items()}
                bad = {k: v for k, v in values.items() if not np.isfinite(v)}
                raise FloatingPointError(
                    f"learner update {version} (after {sgd_steps:.0f} SGD steps) produced non-finite "
                    f"{bad}; its batch: {batch_statistics(sample.data)}"
                )


def check_metric_shapes(metrics: Mapping[str, jax.Array]) -> None:
    """Raises ``ValueError`` unless every update metric is a scalar."""
    for name, value in metrics.items():
        if value.shape != ():
            raise ValueError(
                f"update metric {name!r} has shape {value.shape}; metrics must be scalars "
                "(reduce them, and average over devices with lax.pmean; return per-example "
                "values as UpdateOutput.aux)"
            )


def batch_statistics(data: Any) -> str:
    """``name: min/mean/max (n non-finite)`` of every numeric field of a host batch."""
    parts = []
    for path, x in jax.tree_util.tree_flatten_with_path(data)[0]:
        x = np.asarray(x)
        if x.size and np.issubdtype(x.dtype, np.number):
            finite = x[np.isfinite(x)] if np.issubdtype(x.dtype, np.floating) else x
            name = "/".join(str(getattr(k, "key", k)) for k in path)
            stats = f"{finite.min():.3g}/{finite.mean():.3g}/{finite.max():.3g}" if finite.size else "-"
            parts.append(f"{name}: {stats} ({x.size - finite.size} non-finite)")
    return "; ".join(parts)
