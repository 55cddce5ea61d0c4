"""The learner's parameters through shared memory for nodes on its host, RPC for the others.

``ParamsPublisher`` (in the learner node) publishes the newest parameters at most every
``period_s`` seconds, encoded once per version; ``LocalFirstSource`` (in actors and the
evaluator) reads them with one memory copy when the segment is on its host, and falls back to
the learner's ``get_variables`` RPC otherwise (another host, no ``/dev/shm``, parameters that
outgrew the segment, a read that timed out, or ``SHOAL_PARAMS_VIA=rpc`` in its environment:
``run_distributed_experiment(params_via="rpc")``, ``shoal train --params-via rpc``).
"""

from __future__ import annotations

import threading
from typing import Any

from shoal.core.codec import encode
from shoal.core.environment_variables import value
from shoal.core.interfaces import Learner, VariableSource
from shoal.core.shared_memory import SharedValuePublisher, SharedValueReader


class ParamsPublisher:
    def __init__(self, learner: Learner, period_s: float = 0.02) -> None:
        self._learner, self._period_s = learner, period_s
        self._publisher: SharedValuePublisher | None = None
        self._published = -1
        if SharedValuePublisher.available():
            version, params = learner.get_variables(-1)
            self._publisher = SharedValuePublisher("params", 2 * len(encode(params)) + 65536)
            self._publish(version, params)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="params-publisher", daemon=True)
        if self._publisher is not None:
            self._thread.start()

    def location(self) -> dict[str, str] | None:
        return self._publisher.location() if self._publisher is not None else None

    def _publish(self, version: int, params: Any) -> None:
        if self._publisher is not None and not self._publisher.publish(version, params):
            self._publisher.close()  # (readers' next reads time out: they use RPC from then on)
            self._publisher = None
        self._published = version

    def _run(self) -> None:
        while not self._stop.wait(self._period_s) and self._publisher is not None:
            version, params = self._learner.get_variables(self._published)
            if params is not None:
                self._publish(version, params)

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        if self._publisher is not None:
            self._publisher.close()


class LocalFirstSource(VariableSource):
    """Reads ``learner``'s parameters from its shared-memory segment if it is on this host,
    else (or when a read fails, or ``SHOAL_PARAMS_VIA=rpc``) calls ``learner.get_variables``
    over RPC."""

    def __init__(self, learner: Any) -> None:
        self._learner = learner
        rpc_only = value("SHOAL_PARAMS_VIA") == "rpc"
        self._reader = None if rpc_only else SharedValueReader.attach(learner.shared_params())
        self.local = self._reader is not None

    def get_variables(self, known_version: int = -1) -> tuple[int, Any]:
        if self._reader is not None:
            try:
                return self._reader.read(known_version)
            except (TimeoutError, ValueError):
                self._reader = None  # the segment is gone or stuck: RPC from now on
        return self._learner.get_variables(known_version)
