"""``ReverbServer``: an embedded Reverb server with a client, started without TensorFlow (the
Reverb backend's ``shoal.replay.contract.ReplayServer``)."""

from __future__ import annotations

import random
import socket
from collections.abc import Sequence
from typing import Any

import numpy as np
import portpicker

from shoal.replay.checkpoints import latest_checkpoint
from shoal.replay.reverb.client import ReverbClient, reverb_modules
from shoal.replay.reverb.signature_proto import encode_structure
from shoal.replay.reverb.table_info import table_info
from shoal.replay.tables import TableSpec


class ReverbServer:
    """Starts a Reverb server of ``tables`` (``TableSpec``s or ``reverb.Table``s) on ``port``
    (``None``: a free one) and opens a client to it (``client``, a ``ReverbClient``).

    The server is Reverb's C++ server (``reverb.pybind.Server``, as ``reverb.Server`` makes it),
    built from ``TableSpec``s without importing TensorFlow's Python package, so a replay node
    starts in well under a second. With ``checkpoint_dir``, the server can write checkpoints
    there and restores the latest one at start. Note: Reverb's server listens on all interfaces
    (its API takes no host).

    ``can_sample`` reads the tables given here (well under a microsecond a call), except after a
    restore: Reverb then serves new tables built from the checkpoint, and those given here keep
    the state of empty tables. Python has no handle on the new ones, so it then reads the
    server's table info over the loopback (about 0.1 ms). ``items_sampled`` always reads a
    table's info.
    """

    def __init__(self, tables: Sequence[Any], port: int | None = None, checkpoint_dir: str | None = None) -> None:
        if not tables:
            raise ValueError("a replay server needs at least one table")
        names = [table.name for table in tables]
        if len(set(names)) < len(names):
            raise ValueError(f"replay table names must be unique; got {', '.join(names)}")
        pybind = reverb_modules()[0]
        self.restored_from = latest_checkpoint(checkpoint_dir) if checkpoint_dir else None
        for attempt in range(1 if port else PORT_ATTEMPTS):
            self.port = port or free_port()
            self._tables = {table.name: _internal_table(table, pybind) for table in tables}
            checkpointer = pybind.create_default_checkpointer(checkpoint_dir, "", None) if checkpoint_dir else None
            try:
                self._server = pybind.Server(list(self._tables.values()), self.port, checkpointer)
                break
            except Exception as e:  # noqa: BLE001 -- Reverb's C++ server raises ValueError when it cannot bind
                if "BuildAndStart" not in str(e):
                    raise
                if port or attempt == PORT_ATTEMPTS - 1:
                    raise OSError(f"the replay server could not listen on port {self.port} (taken?): {e}") from None
        self.address = f"localhost:{self.port}"
        self.client = ReverbClient(self.address)
        self._info_client = pybind.Client(self.address) if self.restored_from else None
        self._sampled_at_start = (
            {name: self._info(name).rate_limiter_info.sample_stats.completed for name in self._tables}
            if self.restored_from
            else {}
        )
        # (a restored table's counts go on)

    def can_sample(self, table: str, num_items: int) -> bool:
        """Whether ``table``'s rate limiter would let ``num_items`` more items be sampled now."""
        if self._info_client is None:
            return self._tables[table].can_sample(num_items)
        return can_sample(self._info(table), num_items)

    def items_sampled(self, table: str) -> int:
        """How many items ``table`` has served to samplers since this server started (a heavier
        call than ``can_sample``: it reads the table's whole info)."""
        return int(self._info(table).rate_limiter_info.sample_stats.completed - self._sampled_at_start.get(table, 0))

    def _info(self, table: str) -> Any:
        """``table``'s counts (``shoal.replay.reverb.table_info``: read without TensorFlow)."""
        if self._info_client is None:
            return table_info(self._tables[table].info())
        for proto in self._info_client.ServerInfo(60):  # (seconds: the server is in this process)
            info = table_info(proto)
            if info.name == table:
                return info
        raise KeyError(f"replay table {table!r} is not served here; tables: {', '.join(self._tables)}")

    backend = "reverb"

    def grant(self, table: str, num_items: int, after_mutations: int = 0) -> None:
        """(The native backend's gate for reproducible sampling; Reverb samples freely.)"""

    def stop(self) -> None:
        self._server.Stop()


PORT_ATTEMPTS = 10


def free_port() -> int:
    """A TCP port free on every interface now, outside the OS's ephemeral range where it can
    (``/proc/sys/net/ipv4/ip_local_port_range``): the OS hands ephemeral ports to every
    ``bind(port 0)`` and outgoing connection, so one picked there may be taken by another
    process's before Reverb binds it (seen in the suite: nodes starting side by side). Reverb's
    server binds all interfaces, so the check does too."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low, high = (int(x) for x in f.read().split())
    except (OSError, ValueError):
        return portpicker.pick_unused_port()
    candidates = range(10000, low) if low - 10000 >= 2000 else range(high + 1, 65536)
    if len(candidates) < 2000:
        return portpicker.pick_unused_port()
    for port in random.sample(candidates, 50):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind(("", port))
            except OSError:
                continue
        return port
    return portpicker.pick_unused_port()


def _internal_table(table: Any, pybind: Any) -> Any:
    """Reverb's C++ table (``pybind.Table``) for a ``TableSpec`` or a ``reverb.Table``."""
    if not isinstance(table, TableSpec):
        return table.internal_table

    def selector(kind: str) -> Any:
        if kind == "prioritized":
            return pybind.PrioritizedSelector(float(table.priority_exponent))  # type: ignore[arg-type]  # (TableSpec checks it is set)
        return {"uniform": pybind.UniformSelector, "fifo": pybind.FifoSelector, "lifo": pybind.LifoSelector}[kind]()

    limit = table.rate_limit
    signature = None if table.signature is None else encode_structure(table.signature, _leaf)
    return pybind.Table(
        name=table.name,
        sampler=selector(table.sampler),
        remover=selector(table.remover),
        max_size=int(table.max_size),
        max_times_sampled=int(table.max_times_sampled),
        rate_limiter=pybind.RateLimiter(
            float(limit.samples_per_insert), int(limit.min_size_to_sample), float(limit.min_diff), float(limit.max_diff)
        ),
        extensions=[],
        signature=signature,
    )


def _leaf(spec: Any) -> tuple[str, list, np.dtype]:
    """A signature leaf's ``(name, shape, dtype)``: an ``ArraySpec`` (or a ``tf.TensorSpec``)."""
    dtype = getattr(spec.dtype, "as_numpy_dtype", spec.dtype)
    return getattr(spec, "name", None) or "", list(spec.shape), np.dtype(dtype)


def can_sample(info: Any, num_items: int) -> bool:
    """Reverb's ``RateLimiter::CanSample`` on a table's info (whose insert and sample counts
    include those a restored checkpoint held): the table holds at least ``min_size_to_sample``
    items, and ``inserts * samples_per_insert - samples - num_items >= min_diff``."""
    limiter = info.rate_limiter_info
    if info.current_size < limiter.min_size_to_sample:
        return False
    inserts, samples = limiter.insert_stats.completed, limiter.sample_stats.completed
    return inserts * limiter.samples_per_insert - samples - num_items >= limiter.min_diff
