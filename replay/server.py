"""An embedded Reverb server with a client, bound to loopback."""

from __future__ import annotations

from typing import Sequence

import reverb


class ReplayServer:
    """Starts a Reverb server on ``port`` (``None``: a free one) and opens a client to it.

    With ``checkpoint_dir``, the server can write checkpoints there and restores the latest one
    at start. Note: Reverb's server listens on all interfaces (its API takes no host).
    """

    def __init__(self, tables: Sequence[reverb.Table], port: int | None = None,
                 checkpoint_dir: str | None = None) -> None:
        checkpointer = (reverb.checkpointers.DefaultCheckpointer(checkpoint_dir)
                        if checkpoint_dir else None)
        self._tables = {table.name: table for table in tables}
        self._server = reverb.Server(list(tables), port=port, checkpointer=checkpointer)
        self.port = self._server.port
        self.address = f"localhost:{self.port}"
        self.client = reverb.Client(self.address)

    def can_sample(self, table: str, num_items: int) -> bool:
        """Whether ``table``'s rate limiter would let ``num_items`` more items be sampled now."""
        return self._tables[table].can_sample(num_items)

    def items_sampled(self, table: str) -> int:
        """How many items ``table`` has served to samplers so far (a heavier call than
        ``can_sample``: it reads the table's whole info)."""
        return int(self._tables[table].info.rate_limiter_info.sample_stats.completed)

    def stop(self) -> None:
        self._server.stop()
