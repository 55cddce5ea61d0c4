"""Vector envs stepped off the actor's thread: ``send(actions)`` starts a step, ``recv()`` takes it.

``EnvironmentLoop(overlap=...)`` uses these so that the adder's write of one step and the loop's
own work run while the env takes the next step (``docs/benchmarks.md``, "Actors that overlap"):

* ``"thread"``: the env's ``step`` runs in a thread of this process. It pays only where the
  env leaves Python's GIL while it steps (EnvPool's C++ threads, ale-py's vector env).
* ``"process"``: the env (as it stands, reset, its RNGs included: it is pickled) moves to a
  worker process that steps it; actions and results travel over a pipe between this process and
  its own child. For envs stepped in Python (gymnasium's classic control, most user envs).
* ``"off"``: stepped on the actor's thread, as before.

``"auto"`` picks by env family (``resolve_overlap``: a thread for Atari, else off). Every step
is the step the env would have taken on the actor's thread: same actions, same order, same RNG
streams. Every wait has a bound and ends in one line, and ``close`` ends the worker (asked,
then terminated, then killed if it will not end; a worker whose actor's process died ends at
its pipe's end of file).
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import time
import weakref
from concurrent.futures import Future, ThreadPoolExecutor
from multiprocessing.connection import Connection
from typing import Any

import gymnasium as gym
from gymnasium.utils import EzPickle

from shoal.envs.envpool_env import is_classic_task

OVERLAPS = ("auto", "off", "thread", "process")
_SPIN_S = 0.0005  # (recv polls this long before it blocks: waking up from a blocked read costs ~40 us here)
_CLOSE_S = 10.0  # (how long close() waits for a worker to end before it terminates it)


def check_overlap(overlap: str) -> str:
    """``overlap``, or a one-line ``ValueError`` naming the accepted values."""
    if overlap not in OVERLAPS:
        raise ValueError(f"actor overlap {overlap!r} is not one of {', '.join(OVERLAPS)}")
    return overlap


def steps_off_gil(env: gym.vector.VectorEnv) -> bool:
    """Whether ``env`` steps outside Python's GIL for long enough that a thread pays: ale-py's
    vector env and EnvPool's envs but its classic-control tasks (16 CartPoles step in ~50 us,
    less than handing the step to a thread and back costs)."""
    env = getattr(env, "unwrapped", env)
    names = {cls.__name__ for cls in type(env).__mro__}
    if "EnvPoolVectorEnv" in names:
        return not is_classic_task(getattr(env, "task", ""))
    return "AtariVectorEnv" in names


def resolve_overlap(overlap: str, env: gym.vector.VectorEnv) -> str:
    """What ``"auto"`` means for ``env`` (other values are returned as they are): ``"thread"``
    for an env that steps outside the GIL (``steps_off_gil``: Atari on ale-py or EnvPool, where
    the policy and the adder then run while its C++ threads step), else ``"off"``. Measured on 2
    cores (``docs/benchmarks.md``, "Actors that overlap"): the Atari actor gained 12-20% on a
    quiet machine (-5% to +22% under a load of 4-6); a classic-control env loses by either overlap (its 16 envs step in 50-200 us, about what the
    hand-over to a thread or a process and back costs), so ``"process"`` is a choice, not a default."""
    check_overlap(overlap)
    if overlap != "auto":
        return overlap
    return "thread" if steps_off_gil(env) else "off"


class ThreadStepper:
    """Steps ``env`` in a thread of this process (one step in flight at a time)."""

    kind = "thread"

    def __init__(self, env: gym.vector.VectorEnv) -> None:
        self._env = env
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="shoal-env-step")
        self._future: Future | None = None

    def send(self, actions: Any) -> None:
        if self._future is not None:
            raise RuntimeError("a step is already in flight: recv() it first")
        self._future = self._pool.submit(self._env.step, actions)

    def ready(self) -> bool:
        """Whether the step in flight has returned (its results wait for ``recv``)."""
        future = self._future
        return future is not None and future.done()

    def recv(self, timeout_s: float) -> tuple:
        if self._future is None:
            raise RuntimeError("no step in flight: send() one first")
        future, self._future = self._future, None
        try:
            return future.result(timeout=timeout_s)
        except TimeoutError:
            raise TimeoutError(f"the env's step() has not returned in {timeout_s:g} s (in its thread)") from None

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def portable(env: gym.vector.VectorEnv) -> bytes:
    """``env`` pickled as it stands (its envs, their RNGs and the vector env's autoreset state);
    a ``SyncVectorEnv`` without its ``env_fns`` (``gym.make_vec``'s are local functions; they only
    made the envs, which it holds). Raises what pickle raises for an env that cannot move."""
    fresh = _pickles_fresh(env)
    if fresh is not None:
        raise TypeError(
            f"{fresh} pickles as a fresh copy made from its constructor's arguments (gymnasium's EzPickle), "
            "not as it stands"
        )
    if isinstance(env, gym.vector.SyncVectorEnv):
        state = {k: v for k, v in env.__dict__.items() if k != "env_fns"}
        return pickle.dumps((type(env), state))
    return pickle.dumps((None, env))


def _pickles_fresh(env: Any) -> str | None:
    """The name of the first env or wrapper in ``env`` (a vector env's envs, each down its
    wrappers) that pickles as a new instance rather than as it stands (``EzPickle``: Box2D's,
    MuJoCo's), or ``None``."""
    stack = [env, *getattr(env, "envs", ())]
    while stack:
        x = stack.pop()
        if isinstance(x, EzPickle):
            return type(x).__name__
        inner = getattr(x, "env", None)
        if inner is not None and inner is not x:
            stack.append(inner)
    return None


def _unpickled(data: bytes) -> gym.vector.VectorEnv:
    cls, payload = pickle.loads(data)  # (from this worker's own parent, through its arguments)
    if cls is None:
        return payload
    env = object.__new__(cls)
    env.__dict__.update(payload, env_fns=None)
    return env


def serve(read_fd: int, write_fd: int) -> None:
    """The worker process (``python -c``, started by ``ProcessStepper``): reads the env
    (``portable``'s bytes) from ``read_fd``, then steps it with each action it reads and writes
    the results to ``write_fd``, until ``None`` (or the pipe closes)."""
    commands, results = Connection(read_fd, writable=False), Connection(write_fd, readable=False)
    env = _unpickled(commands.recv_bytes())  # (its own parent's pipe)
    results.send_bytes(b"ready")
    try:
        while True:
            try:
                actions = commands.recv()
            except EOFError:  # (the actor's process ended)
                return
            if actions is None:
                return
            try:
                results.send(("ok", env.step(actions)))
            except Exception as e:  # noqa: BLE001 -- (sent back: the actor raises it in one line)
                results.send(("error", f"{type(e).__name__}: {e}"))
    finally:
        env.close()


class ProcessStepper:
    """Steps ``env`` (pickled as it stands: reset, its RNG states with it) in a worker process
    of its own: a fresh Python (no fork of a process that runs JAX's threads; nothing of the
    caller's ``__main__`` runs there) joined to this process by two pipes."""

    kind = "process"

    def __init__(self, env: gym.vector.VectorEnv, start_timeout_s: float = 120.0) -> None:
        try:
            data = portable(env)
        except Exception as e:  # noqa: BLE001 -- named, in one line
            raise ValueError(
                f"actor overlap 'process': the env ({type(env).__name__}) cannot be pickled to move to a worker "
                f"process ({type(e).__name__}: {e}); use 'thread' or 'off'"
            ) from None
        to_child, from_parent = os.pipe()[::-1]
        from_child, to_parent = os.pipe()
        code = "import sys; from shoal.envs.stepping import serve; serve(int(sys.argv[1]), int(sys.argv[2]))"
        self._process = subprocess.Popen(
            [sys.executable, "-c", code, str(from_parent), str(to_parent)],
            pass_fds=(from_parent, to_parent),
            stdin=subprocess.DEVNULL,
        )
        os.close(from_parent)
        os.close(to_parent)
        self._commands = Connection(to_child, readable=False)
        self._results = Connection(from_child, writable=False)
        self._finalizer = weakref.finalize(self, _end_worker, self._commands, self._results, self._process)
        self._commands.send_bytes(data)
        self._in_flight = False
        self._await_start(start_timeout_s)

    def _await_start(self, timeout_s: float) -> None:
        """Waits until the worker holds the env (a fresh Python's imports: ~1 s), so that its
        first step is not charged with them; one line if it ends or does not start in time."""
        if not self._results.poll(timeout_s):
            self.close()
            raise RuntimeError(f"the env's worker process did not start within {timeout_s:g} s")
        try:
            started = self._results.recv_bytes() == b"ready"
        except (EOFError, OSError):
            started = False
        if not started:
            self.close()
            raise RuntimeError(
                f"the env's worker process ended as it started (exit code {self._process.poll()}; its "
                "error, if any, is on stderr above)"
            ) from None

    def send(self, actions: Any) -> None:
        if self._in_flight:
            raise RuntimeError("a step is already in flight: recv() it first")
        try:
            self._commands.send(actions)
        except OSError as e:
            raise RuntimeError(f"the env's worker process ended (exit code {self._process.poll()}): {e}") from None
        self._in_flight = True

    def ready(self) -> bool:
        """Whether the step in flight has returned (its results wait in the pipe for ``recv``;
        also read from the loop's stall watch: a poll of the pipe, which takes nothing from it)."""
        try:
            return self._in_flight and self._results.poll(0)
        except (OSError, ValueError):  # (closed: nothing will come)
            return False

    def recv(self, timeout_s: float) -> tuple:
        if not self._in_flight:
            raise RuntimeError("no step in flight: send() one first")
        spin_until = time.perf_counter() + _SPIN_S
        while not self._results.poll(0):
            if time.perf_counter() > spin_until:
                break
        if not self._results.poll(timeout_s):
            raise TimeoutError(
                f"the env's step() has not returned in {timeout_s:g} s (in its worker process, pid {self._process.pid})"
            )
        self._in_flight = False
        try:
            status, payload = self._results.recv()  # (its own child's pipe)
        except (EOFError, OSError):
            try:
                code = self._process.wait(1.0)
            except subprocess.TimeoutExpired:
                code = None
            raise RuntimeError(f"the env's worker process ended during a step (exit code {code})") from None
        if status != "ok":
            raise RuntimeError(payload)
        return payload

    @property
    def pid(self) -> int:
        return self._process.pid

    def close(self) -> None:
        """Ends the worker: asked, then after ``_CLOSE_S`` terminated, then killed."""
        self._finalizer()


def _end_worker(commands: Connection, results: Connection, process: subprocess.Popen) -> None:
    """Asks the worker to end, then terminates (and at last kills) it if it has not within ``_CLOSE_S``."""
    try:
        commands.send(None)
    except OSError:
        pass
    for end in (None, process.terminate, process.kill):
        if end is not None:
            end()
        try:
            process.wait(_CLOSE_S)
            break
        except subprocess.TimeoutExpired:
            continue
    commands.close()
    results.close()


def make_stepper(env: gym.vector.VectorEnv, overlap: str) -> ThreadStepper | ProcessStepper | None:
    """The stepper of ``env`` for ``overlap`` (``resolve_overlap``'s; ``None``: ``"off"``)."""
    kind = resolve_overlap(overlap, env)
    if kind == "thread":
        return ThreadStepper(env)
    if kind == "process":
        return ProcessStepper(env)
    return None
