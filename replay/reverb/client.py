"""``ReverbClient``: a Reverb client whose writers need no TensorFlow.

``import reverb`` imports TensorFlow's Python package: about 3.3 s of CPU in every process that
does, on 2 cores. Writing items needs none of it: Reverb's ``TrajectoryWriter`` is its C++ client
(``reverb/libpybind.so``, which links TensorFlow's framework library, a shared library that loads
in milliseconds) wrapped in plain Python. So in a process that has not imported TensorFlow (an
actor node), ``ReverbClient`` loads just that: the C++ client, with Reverb's own
``trajectory_writer`` and ``errors`` modules, and no ``tensorflow`` module. Everything else it is
asked (``server_info``, ``mutate_priorities``, ``checkpoint``, ``sample``) goes to a ``reverb.Client``,
imported on first use (the learner, the runner and the driver's checkpoints, which have Reverb's
full import already or need it anyway). Where TensorFlow is already loaded, or the native load
fails (another Reverb layout), it is Reverb's full import from the start.
"""

from __future__ import annotations

import builtins
import collections
import contextlib
import ctypes
import importlib.util
import os
import sys
import types
from collections.abc import Mapping
from typing import Any

from shoal.replay.reverb.sampler import ReverbSampler, full_reverb

_native: tuple[Any, Any, Any] | None = None  # (pybind, trajectory_writer, errors) modules


def reverb_modules() -> tuple[Any, Any, Any]:
    """Reverb's ``pybind`` (the C++ client), ``trajectory_writer`` and ``errors`` modules:
    without TensorFlow's Python package where it is not loaded yet, else Reverb's own."""
    global _native
    if _native is None:
        if "reverb" in sys.modules or "tensorflow" in sys.modules:
            _native = _full_modules()
        else:
            try:
                _native = _load_without_tensorflow()
            except (ImportError, OSError, AttributeError):
                _native = _full_modules()
    return _native


def _full_modules() -> tuple[Any, Any, Any]:
    reverb = full_reverb()
    return reverb.pybind, reverb.trajectory_writer, reverb.errors


def _package_dir(name: str) -> str:
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        raise ImportError(f"no package {name!r} is installed")
    return os.path.dirname(spec.origin)


def _load_without_tensorflow() -> tuple[Any, Any, Any]:
    """Loads ``reverb/libpybind.so`` as ``reverb.libpybind`` (what ``reverb/pybind.py`` imports
    after ``import tensorflow``, which it does only to load TensorFlow's framework library: that
    library is loaded here directly), then Reverb's ``errors.py`` and ``trajectory_writer.py``
    under private names, their ``from reverb import ...`` answered from these modules. Nothing
    named ``reverb`` enters ``sys.modules`` but ``reverb.libpybind``, under its import lock: a
    later (or concurrent) ``import reverb`` is the real one and reuses that extension."""
    importlib.import_module("numpy")  # (first: the extension's init imports numpy's C API, and crashes otherwise)
    reverb_dir, tensorflow_dir = _package_dir("reverb"), _package_dir("tensorflow")
    ctypes.CDLL(os.path.join(tensorflow_dir, "libtensorflow_framework.so.2"), mode=ctypes.RTLD_GLOBAL)
    with _import_lock("reverb.libpybind"):
        pybind = sys.modules.get("reverb.libpybind")
        if pybind is None:
            pybind = _exec_module("reverb.libpybind", os.path.join(reverb_dir, "libpybind.so"), {})
            sys.modules["reverb.libpybind"] = pybind
    errors = _exec_module(f"{__name__}._reverb_errors", os.path.join(reverb_dir, "errors.py"), {})
    trajectory_writer = _exec_module(
        f"{__name__}._reverb_trajectory_writer",
        os.path.join(reverb_dir, "trajectory_writer.py"),
        {"pybind": pybind, "errors": errors},
    )
    return pybind, trajectory_writer, errors


def _exec_module(name: str, path: str, reverb_names: dict[str, Any]) -> types.ModuleType:
    """The module at ``path``, run with ``from reverb import X`` giving ``reverb_names[X]``."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    if reverb_names:
        stand_in = types.SimpleNamespace(**reverb_names)

        def import_(name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0) -> Any:
            if name == "reverb" and level == 0:
                return stand_in
            return builtins.__import__(name, globals, locals, fromlist, level)

        module.__builtins__ = {**vars(builtins), "__import__": import_}  # type: ignore[attr-defined]
    spec.loader.exec_module(module)
    return module


def _import_lock(name: str) -> contextlib.AbstractContextManager[Any]:
    """The import system's lock of module ``name`` (so a concurrent import of it waits)."""
    manager = getattr(importlib._bootstrap, "_ModuleLockManager", None)  # (CPython's, since 3.3)
    return manager(name) if manager is not None else contextlib.nullcontext()


def deadline_exceeded_error() -> type[Exception]:
    """Reverb's ``DeadlineExceededError`` (what a writer's ``flush`` raises on its timeout)."""
    return reverb_modules()[2].DeadlineExceededError


class ReverbClient:
    """A client of the Reverb server at ``address`` (``host:port``): the Reverb backend's
    ``shoal.replay.contract.ReplayClient``, as ``reverb.Client`` for what it shares with it; see
    the module docstring."""

    backend = "reverb"

    def __init__(self, address: str) -> None:
        self.server_address = address
        self._pybind = reverb_modules()[0]
        self._cpp = self._pybind.Client(address)
        self._reverb: Any = None

    def writer(self, num_keep_alive_refs: int, timeout_s: float = 120.0) -> ReverbWriter:
        """The writer Shoal's adders use (``ReverbWriter``) around ``trajectory_writer``'s."""
        return ReverbWriter(self.trajectory_writer(num_keep_alive_refs), num_keep_alive_refs, timeout_s)

    def trajectory_writer(self, num_keep_alive_refs: int, *, validate_items: bool = True) -> Any:
        """A ``reverb.TrajectoryWriter`` with auto-tuned chunks, as
        ``reverb.Client.trajectory_writer`` makes it."""
        if num_keep_alive_refs < 1:
            raise ValueError(f"num_keep_alive_refs ({num_keep_alive_refs}) must be a positive integer")
        options = self._pybind.AutoTunedChunkerOptions(num_keep_alive_refs, 1.0)
        return reverb_modules()[1].TrajectoryWriter(self._cpp.NewTrajectoryWriter(options, validate_items))

    def sampler(
        self, table: str, items_per_update: int, *, timeout_s: float, poll_s: float, each_item_once: bool
    ) -> ReverbSampler:
        """``table``'s items through Reverb's TensorFlow dataset (``shoal.replay.reverb.sampler``)."""
        return ReverbSampler(self.server_address, table, items_per_update, timeout_s, poll_s, each_item_once)

    def server_info(self, timeout: int | None = None) -> Mapping[str, Any]:
        return self._full().server_info(timeout)

    def mutate_priorities(self, table: str, updates: Mapping[Any, float] | None = None, deletes: Any = None) -> None:
        self._full().mutate_priorities(table, updates=updates, deletes=deletes)

    def checkpoint(self) -> str:
        return self._full().checkpoint()

    def sample(self, table: str, num_samples: int = 1, **kwargs: Any) -> Any:
        """``reverb.Client.sample``: items read one by one, for a look at what a table holds
        (a learner samples through ``shoal.replay.dataset``)."""
        return self._full().sample(table, num_samples, **kwargs)

    def _full(self) -> Any:
        if self._reverb is None:
            self._reverb = full_reverb().Client(self.server_address)
        return self._reverb


class ReverbWriter:
    """The adders' writer on Reverb (``shoal.replay.contract.ReplayWriter``) around a ``TrajectoryWriter``.

    Steps and items go to the writer's C++ object (``TrajectoryWriter._writer``, Reverb 0.14)
    directly: each step as one flat list of columns, each item as references to the last
    ``length`` steps. Reverb's Python wrapper keeps a history object per column, which cost
    about 200 us a vector step, as much as the C++ append itself; flushes and close still go
    through the wrapper. Items stream to the server as they are made (``commit`` does nothing).
    """

    shares_steps = False  # (an item is made of the last steps appended)

    def __init__(self, writer: Any, num_keep_alive_refs: int, timeout_s: float) -> None:
        self._writer, self._cpp, self.timeout_s = writer, writer._writer, timeout_s
        self._refs: collections.deque[list] = collections.deque(maxlen=num_keep_alive_refs)
        self._last_table = "?"

    def append(self, columns: list) -> None:
        self._refs.append(self._cpp.Append(columns))

    def create_item(self, table: str, priority: float, length: int) -> None:
        self._last_table = table
        if length == 1:
            last = self._refs[-1]
            self._cpp.CreateItem(table, priority, [[ref] for ref in last], [True] * len(last))
        else:
            steps = list(self._refs)[-length:]
            self._cpp.CreateItem(table, priority, [list(c) for c in zip(*steps)], [False] * len(steps[0]))

    def append_rows(self, columns: list) -> None:
        """Each row of ``columns`` (the steps on their leading axis) appended as a step."""
        for row in zip(*columns):
            self._refs.append(self._cpp.Append(list(row)))

    def append_item(self, table: str, priority: float, columns: list) -> None:
        """``append(columns)`` and ``create_item(table, priority, 1)`` (``commit`` does nothing)."""
        self._last_table = table
        last = self._cpp.Append(columns)
        self._refs.append(last)
        self._cpp.CreateItem(table, priority, [[ref] for ref in last], [True] * len(last))

    def commit(self) -> None:
        pass

    def send_pending(self) -> None:
        pass  # (nothing is held back: items stream as they are made)

    def flush(self, block_until_num_items: int = 0) -> None:
        """Waits until at most ``block_until_num_items`` written items are unconfirmed."""
        try:
            self._writer.flush(block_until_num_items, timeout_ms=int(self.timeout_s * 1000))
        except deadline_exceeded_error() as e:
            raise TimeoutError(
                f"replay table '{self._last_table}' did not confirm pending items within "
                f"{self.timeout_s}s (inserts wait while the learner lags behind the table's "
                "rate limiter or while a queue is full)"
            ) from e

    def close(self, timeout_s: float | None = None) -> bool:
        """Closes the writer; with ``timeout_s``, after waiting at most that long for the
        pending items (those not confirmed by then are dropped). Returns whether every item
        was confirmed."""
        confirmed = True
        if timeout_s is not None:
            try:
                self._writer.flush(0, timeout_ms=max(1, int(timeout_s * 1000)))
            except deadline_exceeded_error():
                confirmed = False
        self._writer.close()
        return confirmed


def make_replay_client(address: str) -> ReverbClient:
    """A client for the Reverb server at ``address`` (``host:port``)."""
    return ReverbClient(address)
