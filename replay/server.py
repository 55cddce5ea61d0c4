"""An embedded Reverb server with a client, bound to loopback."""

from __future__ import annotations

from typing import Sequence

import reverb


class ReplayServer:
    """Starts a Reverb server on ``port`` (``None``: a free one) and opens a client to it."""

    def __init__(self, tables: Sequence[reverb.Table], port: int | None = None) -> None:
        self._server = reverb.Server(list(tables), port=port)
        self.port = self._server.port
        self.address = f"localhost:{self.port}"
        self.client = reverb.Client(self.address)

    def table_info(self, table: str) -> dict:
        info = self.client.server_info(timeout=10)[table]
        return {"current_size": info.current_size, "num_inserts": info.rate_limiter_info.insert_stats.completed,
                "num_samples": info.rate_limiter_info.sample_stats.completed}

    def stop(self) -> None:
        self._server.stop()
