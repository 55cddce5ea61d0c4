"""Shared memory on one host: every ``/dev/shm`` segment Shoal makes, for both of its uses.

A segment is a file in ``/dev/shm`` (mode 0600: only this user's processes can map it), named
``shoal-<label>-<writer pid>-<n>``: ``sweep_segments`` removes the segments of this user whose
writer process is gone (a launcher sweeps its dead nodes' segments when its program ends, and
every new publisher sweeps those of any dead writer). Two kinds are built on that:

**A versioned value** (``SharedValuePublisher``, ``SharedValueReader``): one writer publishes,
readers on the same host copy it. For large, read-mostly values (a learner's parameters) that
many local processes fetch: 32 actors pulling 4 MB each over gRPC are bandwidth-bound; here each
reads the newest version with one memory copy, and the writer encodes it once per version (with
``shoal.core.codec``, the RPC codec: no pickle). Readers on other hosts keep using RPC
(``SharedValueReader.attach`` returns ``None`` when the segment is not on this host).
Layout: a header of four aligned 64-bit words ``(sequence, version, length, capacity)`` then the
frame. Writes follow a sequence lock: the sequence is odd while the header and frame are
written, and a reader retries a copy during which it changed, so it never sees a torn value.
Each word is stored and loaded whole (one aligned 8-byte access through a ``memoryview``;
``struct.pack_into`` would zero the header before filling it, and a reader could catch the
zeros), and x86-64 keeps both stores and loads in program order. A value larger than the
segment is not published (``publish`` returns ``False``): readers then see the last one that
fit, and callers fall back to RPC. A publisher removes its segment when it closes; one killed
first cannot, so each segment has a keeper (``_keep``): a ``sh`` of its own session that holds
the read end of a pipe only the publisher's process writes, and removes the segment when that
pipe closes, i.e. when the publisher's process is gone however it ended (SIGKILL of it, or of a
launcher whose nodes die with it). The keeper is not the publisher's child but its grandchild
(its ``sh`` starts it and exits): Ray kills a worker's children when the worker ends, and the
keeper of a Ray node's segment must outlive its node. The sweeps see to what a keeper could not
(a keeper killed too, e.g. by ``kill -9 -1``).

**A replay client's segment of arrays** (``Segment``, ``Attached``, ``footprint``): native
replay's same-host bulk data. Over RPC, every array of an insert or a sample crosses gRPC
(Python's gRPC moves ~300 MB/s: an Atari-sized sample batch of 14 MB took 45 ms). A client on the server's host instead makes a
``Segment`` (a file in ``/dev/shm``, mode 0600, ``shoal-replay-<pid>-<ns>``), the server maps it
(``attach``: the name must be of that form, a regular file of this user, of the size the client
said), and the client unlinks the file at once (both keep their mappings; nothing is left behind
however either process ends). Then:

* a writer lays its new steps' arrays in the segment and sends only their places
  (``[dtype, shape, offset]`` per array); the server copies them out in the ``insert_shared``
  call, and the writer reuses the segment only after that call returned (one call in flight);
* a dataset asks ``sample_shared`` to lay a batch's columns in its segment; it copies them out
  before it asks for the next batch.

Only numeric and bool arrays travel this way (anything else goes over RPC, as do calls whose
arrays do not fit); places are checked against the segment (no read or write outside it).
A client on another host cannot make the server map anything: ``attach`` finds no such file
and the client keeps to RPC.
"""

from __future__ import annotations

import functools
import itertools
import math
import mmap
import os
import re
import socket
import stat
import subprocess
import time
import warnings
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from shoal.core.codec import decode, encode

SHM_DIR = "/dev/shm"
_SEQUENCE, _VERSION, _LENGTH, _CAPACITY = range(4)  # the header's 64-bit words
_HEADER_SIZE = 32
_CLOSED = -2  # the version of a segment its publisher closed
_SEGMENT = re.compile(r"^shoal-.+-(\d+)-\d+$")  # shoal-<label>-<writer pid>-<ns>


def available(directory: str = SHM_DIR) -> bool:
    """Whether segments can be made here (``directory`` exists and this user may write it)."""
    return os.path.isdir(directory) and os.access(directory, os.W_OK)


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this machine (another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def sweep_segments(
    pids: Iterable[int] | None = None, directory: str | None = None, even_alive: bool = False
) -> list[str]:
    """Removes this user's segments whose writer process is dead (only those written by
    ``pids``, if given; ``even_alive``: theirs even if they still run, e.g. this process's own
    just before it exits without closing its publishers); returns their paths."""
    directory = directory or SHM_DIR
    wanted = None if pids is None else set(pids)
    removed: list[str] = []
    try:
        names = os.listdir(directory)
    except OSError:
        return removed
    for name in names:
        match = _SEGMENT.match(name)
        if not match:
            continue
        pid, path = int(match.group(1)), os.path.join(directory, name)
        if (wanted is not None and pid not in wanted) or (process_alive(pid) and not even_alive):
            continue
        try:
            if os.stat(path).st_uid == os.getuid():
                os.unlink(path)
                removed.append(path)
        except OSError:
            pass
    return removed


def _create(path: str, size: int) -> mmap.mmap:
    """A new segment file at ``path`` (mode 0600; never an existing file or a link) of ``size``
    bytes, mapped; the file is removed again if it cannot be sized or mapped."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.ftruncate(fd, size)
        return mmap.mmap(fd, size)
    except BaseException:
        os.unlink(path)
        raise
    finally:
        os.close(fd)


def _header(buffer: mmap.mmap) -> memoryview:
    """The header as four int64 words (aligned: a mapping starts on a page)."""
    return memoryview(buffer)[:_HEADER_SIZE].cast("q")


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
        sweep_segments()  # left by writers that were killed before they could remove theirs
        self.path = os.path.join(SHM_DIR, f"shoal-{label}-{os.getpid()}-{time.monotonic_ns()}")
        self._map = _create(self.path, _HEADER_SIZE + capacity)
        self._capacity, self._sequence = capacity, 0
        self._header = _header(self._map)
        self._header[_VERSION], self._header[_CAPACITY] = -1, capacity
        self._keeper = _keep(self.path)

    @classmethod
    def available(cls) -> bool:
        return available(SHM_DIR)

    def location(self) -> dict[str, str]:
        return {"path": self.path, "host": host_id()}

    def publish(self, version: int, value: Any) -> bool:
        frame = encode(value)
        if len(frame) > self._capacity:
            return False
        self._write(version, frame)
        return True

    def _write(self, version: int, frame: bytes) -> None:
        header = self._header
        header[_SEQUENCE] = self._sequence = self._sequence + 1  # odd: being written
        header[_VERSION], header[_LENGTH] = version, len(frame)
        self._map[_HEADER_SIZE : _HEADER_SIZE + len(frame)] = frame
        header[_SEQUENCE] = self._sequence = self._sequence + 1

    def close(self) -> None:
        """Marks the segment closed (readers' next ``read`` raises ``ValueError``) and removes it."""
        self._write(_CLOSED, b"")
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        if self._keeper is not None and self._keeper.stdin is not None:
            self._keeper.stdin.close()  # (its pipe closes: the keeper ends, removing nothing more)
        self._header.release()
        self._map.close()


def _keep(path: str) -> subprocess.Popen | None:
    """The keeper of the segment at ``path`` (see the module): removes it once this process
    is gone, or ``close`` closed its pipe. ``None`` where none can be started (then only the
    sweeps remove a segment its publisher could not)."""
    try:
        with warnings.catch_warnings():  # (JAX warns of any fork; this one is a fork and exec)
            warnings.filterwarnings("ignore", "os.fork", RuntimeWarning)
            # The pipe moves to fd 3 (a background list's stdin is /dev/null), the keeper runs in
            # the background, and its parent exits at once: the keeper's parent is then init (or
            # a subreaper).
            starter = subprocess.Popen(
                ["sh", "-c", 'exec 3<&0 </dev/null; (read -r _ <&3; rm -f -- "$1") &', "shoal-segment-keeper", path],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )  # (its own session: not a terminal's Ctrl-C)
    except OSError:
        return None
    starter.wait()
    return starter


class SharedValueReader:
    def __init__(self, path: str) -> None:
        fd = os.open(path, os.O_RDONLY)
        try:
            self._map = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
        finally:
            os.close(fd)
        self._header = _header(self._map)

    @classmethod
    def attach(cls, location: dict[str, str] | None) -> SharedValueReader | None:
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
        header = self._header
        while True:
            sequence = header[_SEQUENCE]
            if sequence % 2 == 0:
                version, length = header[_VERSION], header[_LENGTH]
                fresh = version >= 0 and version != known_version
                frame = self._map[_HEADER_SIZE : _HEADER_SIZE + length] if fresh else b""  # a copy
                if header[_SEQUENCE] == sequence:  # nothing changed while we read
                    if version == _CLOSED:
                        raise ValueError("the publisher closed this shared value")
                    return version, decode(frame) if fresh else None
            if time.monotonic() > deadline:
                raise TimeoutError(f"no consistent copy of the shared value within {timeout_s}s")
            time.sleep(0.0001)  # the writer is mid-frame

    def close(self) -> None:
        self._header.release()
        self._map.close()


# -- a replay client's segment of arrays ----------------------------------------------------------

NAME = re.compile(r"^shoal-replay-\d+-\d+$")  # (launch's sweep removes those of dead pids)
ALIGN = 64
KINDS = "biuf"  # bool, signed, unsigned, float
_counter = itertools.count()


def footprint(layouts: Sequence[tuple[np.dtype, tuple]]) -> int:
    """The bytes ``(dtype, shape)`` arrays take laid one after another in a segment (aligned)."""
    return sum(-(-math.prod(shape) * dtype.itemsize // ALIGN) * ALIGN for dtype, shape in layouts)


def _places(layouts: Sequence[tuple[np.dtype, tuple]], capacity: int) -> list[list] | None:
    """Each ``(dtype, shape)`` array's ``[dtype, shape, offset]`` when laid one after another
    (aligned) from 0, or ``None`` if one cannot travel here (its dtype) or they do not fit in
    ``capacity`` bytes."""
    places, offset = [], 0
    for dtype, shape in layouts:
        if dtype.kind not in KINDS or dtype.hasobject:
            return None
        places.append([dtype.str, list(shape), offset])
        offset += footprint([(dtype, shape)])
    return places if offset <= capacity else None


def _views(buffer: Any, size: int, places: Sequence[Sequence[Any]]) -> list[np.ndarray]:
    """The arrays ``places`` names in ``buffer`` (views), each checked to lie inside ``size``."""
    out = []
    for dtype, shape, offset in places:
        dtype, shape, offset = _dtype(dtype), tuple(int(d) for d in shape), int(offset)
        if any(d < 0 for d in shape):
            raise ValueError(f"an array of dtype {dtype} and shape {shape} cannot travel in shared memory")
        count = math.prod(shape)
        if offset < 0 or offset % ALIGN or offset + count * dtype.itemsize > size:
            raise ValueError(
                f"an array at offset {offset} of {count * dtype.itemsize} bytes lies outside the {size}-byte segment"
            )
        out.append(np.frombuffer(buffer, dtype, count, offset).reshape(shape))
    return out


@functools.lru_cache(maxsize=64)
def _dtype(name: Any) -> np.dtype:
    """The dtype ``name`` names, if it may travel in shared memory (``KINDS``)."""
    dtype = np.dtype(str(name))
    if dtype.kind not in KINDS or dtype.hasobject:
        raise ValueError(f"an array of dtype {dtype} cannot travel in shared memory")
    return dtype


class _Mapped:
    """A mapping of a segment: ``put`` lays arrays in it, ``copies`` reads them back."""

    _map: mmap.mmap
    size: int

    def put(self, arrays: Sequence[np.ndarray]) -> list[list] | None:
        """Lays ``arrays`` in the segment; their places, or ``None`` (nothing written) if they
        cannot travel here."""
        laid = self.reserve([(array.dtype, array.shape) for array in arrays])
        if laid is None:
            return None
        places, views = laid
        for array, view in zip(arrays, views):
            np.copyto(view, array, casting="no")
        return places

    def reserve(self, layouts: Sequence[tuple[np.dtype, tuple]]) -> tuple[list[list], list[np.ndarray]] | None:
        """Places for arrays of these ``(dtype, shape)`` laid one after another, and the views to
        write them through; ``None`` if they cannot travel here."""
        places = _places(layouts, self.size)
        return None if places is None else (places, _views(self._map, self.size, places))

    def copies(self, places: Sequence[Sequence[Any]]) -> list[np.ndarray]:
        """Copies of the arrays at ``places``."""
        return [view.copy() for view in self.views(places)]

    def views(self, places: Sequence[Sequence[Any]]) -> list[np.ndarray]:
        """The arrays at ``places`` (views of the segment: valid while it is mapped and unchanged)."""
        return _views(self._map, self.size, places)

    def close(self) -> None:
        self._map.close()


class Segment(_Mapped):
    """A client's segment of ``size`` bytes (module docstring)."""

    def __init__(self, size: int, directory: str = SHM_DIR) -> None:
        self.size = int(size)
        self.name = f"shoal-replay-{os.getpid()}-{time.time_ns()}{next(_counter)}"
        self._path = os.path.join(directory, self.name)
        self._map = _create(self._path, self.size)
        self._linked = True

    @staticmethod
    def available(directory: str = SHM_DIR) -> bool:
        return available(directory)

    def unlink(self) -> None:
        """Removes the file (the server mapped it, or never will)."""
        if self._linked:
            self._linked = False
            try:
                os.unlink(self._path)
            except FileNotFoundError:
                pass

    def close(self) -> None:
        self.unlink()
        super().close()


class Attached(_Mapped):
    """The server's mapping of a client's segment (module docstring); ``FileNotFoundError`` if
    this host has none of that name."""

    def __init__(self, name: str, size: int, directory: str = SHM_DIR) -> None:
        if not isinstance(name, str) or not NAME.match(name):
            raise ValueError(f"{name!r} is not a native replay segment (shoal-replay-<pid>-<n>)")
        self.name, self.size = name, int(size)
        fd = os.open(os.path.join(directory, name), os.O_RDWR | os.O_NOFOLLOW)
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid() or info.st_size != self.size:
                raise ValueError(f"{name} is not a {self.size}-byte segment of this user")
            self._map = mmap.mmap(fd, self.size)
        finally:
            os.close(fd)

    @property
    def pid(self) -> int:
        """The client's process (from the name)."""
        return int(self.name.split("-")[2])


__all__ = [
    "SHM_DIR",
    "Attached",
    "available",
    "Segment",
    "SharedValuePublisher",
    "SharedValueReader",
    "footprint",
    "host_id",
    "process_alive",
    "sweep_segments",
]
