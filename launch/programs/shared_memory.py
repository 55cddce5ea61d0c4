"""A versioned value in shared memory: one writer publishes, readers on the same host copy it.

For large, read-mostly values (a learner's parameters) that many local processes fetch: 32
actors pulling 4 MB each over gRPC are bandwidth-bound; here each reads the newest version
with one memory copy, and the writer encodes it once per version (with the RPC codec: no
pickle). Readers on other hosts keep using RPC (``SharedValueReader.attach`` returns ``None``
when the segment is not on this host).

A segment is a file in ``/dev/shm`` (mode 0600: only this user's processes can read it),
named after the writer's pid. Layout: a 32-byte header ``(sequence, version, length,
capacity)`` then the frame. Writes follow a sequence lock: the sequence is odd while a frame is
written, and a reader retries a copy during which it changed, so it never sees a torn value.
A value larger than the segment is not published (``publish`` returns ``False``): readers
then see the last one that fit, and callers fall back to RPC.
"""

from __future__ import annotations

import mmap
import os
import socket
import struct
import time
from typing import Any

from shoal.launch.programs.rpc.codec import decode, encode

SHM_DIR = "/dev/shm"
_HEADER = struct.Struct("<QqQQ")  # sequence, version, frame length, capacity
_CLOSED = -2  # the version of a segment its publisher closed


def host_id() -> str:
    """Names this machine (and boot): readers elsewhere must not trust a same-named file."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = "?"
    return f"{socket.gethostname()}/{boot}"


class SharedValuePublisher:
    def __init__(self, label: str, capacity: int) -> None:
        """A segment for frames of up to ``capacity`` bytes (``label`` goes into its name)."""
        self.path = os.path.join(SHM_DIR, f"shoal-{label}-{os.getpid()}-{time.monotonic_ns()}")
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.ftruncate(fd, _HEADER.size + capacity)
            self._map = mmap.mmap(fd, _HEADER.size + capacity)
        finally:
            os.close(fd)
        self._capacity, self._sequence = capacity, 0
        _HEADER.pack_into(self._map, 0, 0, -1, 0, capacity)

    @classmethod
    def available(cls) -> bool:
        return os.path.isdir(SHM_DIR) and os.access(SHM_DIR, os.W_OK)

    def location(self) -> dict[str, str]:
        return {"path": self.path, "host": host_id()}

    def publish(self, version: int, value: Any) -> bool:
        frame = encode(value)
        if len(frame) > self._capacity:
            return False
        self._sequence += 1  # odd: a frame is being written
        _HEADER.pack_into(self._map, 0, self._sequence, version, len(frame), self._capacity)
        self._map[_HEADER.size:_HEADER.size + len(frame)] = frame
        self._sequence += 1
        _HEADER.pack_into(self._map, 0, self._sequence, version, len(frame), self._capacity)
        return True

    def close(self) -> None:
        """Marks the segment closed (readers' next ``read`` raises ``ValueError``) and removes it."""
        _HEADER.pack_into(self._map, 0, self._sequence + 2, _CLOSED, 0, self._capacity)
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        self._map.close()


class SharedValueReader:
    def __init__(self, path: str) -> None:
        fd = os.open(path, os.O_RDONLY)
        try:
            self._map = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
        finally:
            os.close(fd)

    @classmethod
    def attach(cls, location: dict[str, str] | None) -> "SharedValueReader | None":
        """A reader of the segment at ``location``, or ``None`` if it is on another host or gone."""
        if not location or location.get("host") != host_id():
            return None
        try:
            return cls(location["path"])
        except (OSError, ValueError):
            return None

    def read(self, known_version: int = -1, timeout_s: float = 1.0) -> tuple[int, Any]:
        """``(version, value)``; ``value`` is ``None`` if nothing newer than ``known_version`` is
        published. Raises ``TimeoutError`` if no consistent copy could be made in ``timeout_s``,
        ``ValueError`` once the publisher closed the segment."""
        deadline = time.monotonic() + timeout_s
        while True:
            sequence, version, length, _ = _HEADER.unpack_from(self._map, 0)
            if sequence % 2 == 0:
                if version == _CLOSED:
                    raise ValueError("the publisher closed this shared value")
                if version < 0 or version == known_version:
                    return version, None
                frame = self._map[_HEADER.size:_HEADER.size + length]  # (a copy)
                if _HEADER.unpack_from(self._map, 0)[0] == sequence:
                    return version, decode(frame)
            if time.monotonic() > deadline:
                raise TimeoutError(f"no consistent copy of the shared value within {timeout_s}s")
            time.sleep(0.0001)  # the writer is mid-frame

    def close(self) -> None:
        self._map.close()
