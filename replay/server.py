"""An embedded Reverb server with a client, bound to loopback."""

from __future__ import annotations

import os
from typing import Any, Sequence

import reverb


class ReplayServer:
    """Starts a Reverb server on ``port`` (``None``: a free one) and opens a client to it.

    With ``checkpoint_dir``, the server can write checkpoints there and restores the latest one
    at start. Note: Reverb's server listens on all interfaces (its API takes no host).

    ``can_sample`` and ``items_sampled`` read the ``tables`` given here (well under a
    microsecond a call), except after a restore: Reverb then serves new tables built from the
    checkpoint, and those given here keep the state of empty tables. Python has no handle on
    the new ones, so both then read the server's table info over the loopback (about 0.1 ms).
    """

    def __init__(self, tables: Sequence[reverb.Table], port: int | None = None,
                 checkpoint_dir: str | None = None) -> None:
        checkpointer = (reverb.checkpointers.DefaultCheckpointer(checkpoint_dir)
                        if checkpoint_dir else None)
        self._tables = {table.name: table for table in tables}
        self.restored_from = latest_checkpoint(checkpoint_dir) if checkpoint_dir else None
        self._server = reverb.Server(list(tables), port=port, checkpointer=checkpointer)
        self.port = self._server.port
        self.address = f"localhost:{self.port}"
        self.client = reverb.Client(self.address)
        self._info_client = reverb.pybind.Client(self.address) if self.restored_from else None
        self._sampled_at_start = {name: self._info(name).rate_limiter_info.sample_stats.completed
                                  for name in self._tables}  # (a restored table's counts go on)

    def can_sample(self, table: str, num_items: int) -> bool:
        """Whether ``table``'s rate limiter would let ``num_items`` more items be sampled now."""
        if self._info_client is None:
            return self._tables[table].can_sample(num_items)
        return can_sample(self._info(table), num_items)

    def items_sampled(self, table: str) -> int:
        """How many items ``table`` has served to samplers since this server started (a heavier
        call than ``can_sample``: it reads the table's whole info)."""
        return int(self._info(table).rate_limiter_info.sample_stats.completed - self._sampled_at_start[table])

    def _info(self, table: str) -> Any:
        """``table``'s info: a ``reverb.TableInfo``, or after a restore its proto (the same
        fields, without decoding the signature)."""
        if self._info_client is None:
            return self._tables[table].info
        from reverb.cc import schema_pb2

        for proto in self._info_client.ServerInfo(60):  # (seconds: the server is in this process)
            info = schema_pb2.TableInfo.FromString(proto)
            if info.name == table:
                return info
        raise KeyError(f"replay table {table!r} is not served here; tables: {', '.join(self._tables)}")

    def stop(self) -> None:
        self._server.stop()


def latest_checkpoint(checkpoint_dir: str) -> str | None:
    """The checkpoint Reverb's default checkpointer restores from ``checkpoint_dir``: the last,
    by name, of the subdirectories it finished writing (those holding ``DONE``); else ``None``."""
    try:
        names = sorted(os.listdir(checkpoint_dir), reverse=True)
    except FileNotFoundError:
        return None
    for name in names:
        if os.path.exists(os.path.join(checkpoint_dir, name, "DONE")):
            return os.path.join(checkpoint_dir, name)
    return None


def can_sample(info: Any, num_items: int) -> bool:
    """Reverb's ``RateLimiter::CanSample`` on a table's info (whose insert and sample counts
    include those a restored checkpoint held): the table holds at least ``min_size_to_sample``
    items, and ``inserts * samples_per_insert - samples - num_items >= min_diff``."""
    limiter = info.rate_limiter_info
    if info.current_size < limiter.min_size_to_sample:
        return False
    inserts, samples = limiter.insert_stats.completed, limiter.sample_stats.completed
    return inserts * limiter.samples_per_insert - samples - num_items >= limiter.min_diff
