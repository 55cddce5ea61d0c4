"""Same-host bulk data for native replay: a client's shared-memory segment.

Over RPC, every array of an insert or a sample crosses gRPC (Python's gRPC moves ~300 MB/s:
an Atari-sized sample batch of 14 MB took 45 ms). A client on the server's host instead makes a
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
import stat
import time
from typing import Any, Sequence

import numpy as np

SHM_DIR = "/dev/shm"
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
        fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            os.ftruncate(fd, self.size)
            self._map = mmap.mmap(fd, self.size)
        except BaseException:
            os.unlink(self._path)
            raise
        finally:
            os.close(fd)
        self._linked = True

    @staticmethod
    def available(directory: str = SHM_DIR) -> bool:
        return os.path.isdir(directory) and os.access(directory, os.W_OK)

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


__all__ = ["Attached", "Segment", "footprint"]
