"""Address books: where the nodes of a running program find each other.

A server node publishes the address it *advertises* (reachable by the other nodes: loopback on
one machine, the node's IP on a cluster), which may differ from the interface it *binds*
(``127.0.0.1``, or ``0.0.0.0`` to accept connections from other machines). Local launchers use a
``FileAddressBook`` in the run directory; the Ray launcher a named Ray actor
(``shoal.launch.programs.ray.addresses.RayAddressBook``), which needs no shared filesystem.
"""

from __future__ import annotations

import abc
import os
import time

from shoal.core.files import make_dirs, write_atomic


class AddressBook(abc.ABC):
    @abc.abstractmethod
    def publish(self, label: str, address: str) -> None:
        """Records ``address`` (``host:port``) for node ``label`` (replacing an older one)."""

    @abc.abstractmethod
    def get(self, label: str) -> str | None:
        """The address of ``label``, or ``None`` if it published none (yet)."""

    def lookup(self, label: str, timeout_s: float = 120.0) -> str:
        """Waits up to ``timeout_s`` for ``label``'s address."""
        deadline = time.monotonic() + timeout_s
        while (address := self.get(label)) is None:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"node {label!r} published no address within {timeout_s}s (did it fail to start? see its log)"
                )
            time.sleep(0.05)
        return address


class FileAddressBook(AddressBook):
    """One small file per node label in ``directory`` (one machine, or a shared filesystem)."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        make_dirs(directory)

    def publish(self, label: str, address: str) -> None:
        write_atomic(os.path.join(self.directory, label), address)  # never half-written, never through a link

    def get(self, label: str) -> str | None:
        try:
            with open(os.path.join(self.directory, label)) as f:
                return f.read()
        except FileNotFoundError:
            return None

    def clear(self) -> None:
        """Forgets every address (those of an earlier run in the same directory)."""
        for name in os.listdir(self.directory):
            os.remove(os.path.join(self.directory, name))
