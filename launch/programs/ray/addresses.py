"""A Ray launch's addresses: a named actor on the driver's machine (``Addresses``) that every
node publishes its address to and reads its peers' from (``RayAddressBook``): no shared
filesystem between the hosts."""

from __future__ import annotations

from typing import Any

import ray

from shoal.launch.programs.addressing import AddressBook


@ray.remote(num_cpus=0)
class Addresses:
    """The launch's address book, a named actor on the driver's machine: each node's address,
    how often each node started, and each node's latest process (for the sweep at the end)."""

    def __init__(self) -> None:
        self._addresses: dict[str, str] = {}
        self._starts: dict[str, int] = {}
        self._pids: dict[str, tuple[str, int]] = {}

    def publish(self, label: str, address: str) -> None:
        self._addresses[label] = address

    def get(self, label: str) -> str | None:
        return self._addresses.get(label)

    def started(self, label: str, node_id: str, pid: int) -> int:
        self._starts[label] = self._starts.get(label, 0) + 1
        self._pids[label] = (node_id, pid)
        return self._starts[label]

    def starts(self) -> dict[str, int]:
        return dict(self._starts)

    def pids(self) -> dict[str, tuple[str, int]]:
        """``{label: (Ray node id, pid)}`` of every node's latest process."""
        return dict(self._pids)

    def alive(self) -> bool:
        return True


class RayAddressBook(AddressBook):
    """Addresses in the launch's named ``Addresses`` actor. Once this process's Ray is shut
    down (the program closed), each call raises ``ConnectionError``: a Ray call then would
    start a new local Ray of its own."""

    def __init__(self, actor: Any) -> None:
        self._actor = actor

    def publish(self, label: str, address: str) -> None:
        ray.get(self._connected().publish.remote(label, address), timeout=60)

    def get(self, label: str) -> str | None:
        return ray.get(self._connected().get.remote(label), timeout=60)

    def _connected(self) -> Any:
        if not ray.is_initialized():
            raise ConnectionError("the launch's Ray is shut down (its program ended)")
        return self._actor
