"""The environment loop (actor <-> vector env) and the evaluation loop."""

from __future__ import annotations

import os
import sys
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from typing import Any, Protocol, cast

import gymnasium as gym
import numpy as np

from shoal.actors.actor import BatchedActor
from shoal.core.counting import Counter
from shoal.core.environment_variables import value
from shoal.core.interfaces import Actor
from shoal.core.loggers import Logger, NoOpLogger
from shoal.core.native_log_filter import restore_stderr
from shoal.core.timing import Stopwatch, breakdown
from shoal.core.types import Step
from shoal.envs.environments import action_clipper, final_observations
from shoal.envs.observations import check_action_mask
from shoal.envs.stepping import make_stepper


class _Prefetching(Protocol):
    """An actor that prefetches (``prefetches``): its ``observe`` also takes the next observation,
    to start the policy on it early, and the loop's stopwatch (``BatchedActor``'s)."""

    def observe(self, step: Step, next_observation: Any, stopwatch: Stopwatch) -> None: ...


class EnvironmentLoop:
    """Steps a vector env with an actor, one vector step per ``step()`` call.

    Counts ``env_steps`` and ``episodes`` in ``counter`` and logs finished-episode returns
    (mean over the episodes that ended since the last log line). An env that raises in ``step``,
    returns a NaN or infinite observation, or a reward that is not a finite float32 (NaN, inf,
    1e308: replay keeps rewards as float32) or an episode return that is not finite, stops the
    loop with one ``RuntimeError`` saying so, before the step reaches the actor (and replay).
    ``stopwatch`` times ``env_step``, ``policy``, ``replay_insert`` (``observe``) and
    ``param_fetch`` (``update``); each log row has their shares of the time since the last row.

    An actor whose ``prefetches`` attribute is true (a ``BatchedActor``) is given the next
    observation with each step (or as ``prefetch`` says), so it computes the next action while
    its adder writes (``BatchedActor.observe``).

    An env whose ``step()`` has not returned after ``SHOAL_STEP_TIMEOUT_S`` seconds (default 60)
    ends the process with one ``shoal: error:`` line naming the actor, the env and the bound, exit
    status 1 (``on_stall`` replaces that): the step cannot be interrupted, and a distributed
    run's launcher restarts the actor (a one-process run stops; its last checkpoint stays). A
    thread of the loop's own checks it (``_watch``); the step only writes when it started.

    ``overlap`` (``shoal.envs.stepping``: ``"off"``, ``"thread"``, ``"process"`` or ``"auto"``)
    steps the env elsewhere, so that the adder's write, ``update`` and the loop's own work run
    while the env takes the next step (``_step_overlapped``): the same steps, actions and keys as
    without, but for the params an action is computed with (those before ``update``). ``close``
    ends its worker (a finalizer does too).
    """

    def __init__(
        self,
        env: gym.vector.VectorEnv,
        actor: Actor,
        counter: Counter | None = None,
        logger: Logger | None = None,
        stopwatch: Stopwatch | None = None,
        prefetch: bool | None = None,
        on_stall: Callable[[str], None] | None = None,
        label: str = "the actor",
        overlap: str = "off",
    ) -> None:
        self._env = env
        self._label = label
        self._actor = actor
        self._prefetch = bool(getattr(actor, "prefetches", False)) if prefetch is None else prefetch
        self._counter = counter or Counter()
        self._logger = logger or NoOpLogger()
        self._num_envs = env.num_envs
        self._clip = action_clipper(env)
        self._obs, _ = env.reset()
        self._actions = getattr(env, "single_action_space", None)  # (a mask of Box actions may name none)
        check_action_mask(self._obs, 0, self._actions)
        self._float_keys = _float_keys(self._obs)  # (decided once: the per-step check reads only these)
        self._returns = np.zeros(self._num_envs)
        self._lengths = np.zeros(self._num_envs, np.int64)
        self._finished: list[tuple[float, int]] = []
        self._start = time.monotonic()
        self.env_steps = 0
        self.stopwatch = stopwatch or Stopwatch()
        self._last_log, self._last_seconds = self._start, dict[str, float]()
        self._stepping_since: float | None = None  # (the watch's one reading: when the env step began)
        self._step_timeout_s = float(value("SHOAL_STEP_TIMEOUT_S"))
        self._stepper = make_stepper(env, overlap)  # (after the reset: a worker takes the env as it stands)
        self.overlap = self._stepper.kind if self._stepper is not None else "off"
        self._sent: tuple | None = None  # (the actions and extras of the step in flight, overlapped)
        self._stepper_finalizer = weakref.finalize(self, self._stepper.close) if self._stepper is not None else None
        threading.Thread(
            target=_watch,
            args=(weakref.ref(self), self._step_timeout_s, on_stall or _stalled),
            name="shoal-step-watch",
            daemon=True,
        ).start()

    def stall_message(self, stuck_s: float) -> str:
        """The line for a step that has taken ``stuck_s`` seconds."""
        return (
            f"shoal: error: {self._label}: the environment's step() "
            f"({_env_name(self._env)}) has not returned in {stuck_s:.0f} s, after {self.env_steps:,} env "
            f"steps (SHOAL_STEP_TIMEOUT_S={self._step_timeout_s:g}); a stuck environment: its process ends"
        )

    def stuck_since(self) -> float | None:
        """When the env step under way began (``None``: none is). A step sent to an overlapped
        env that has returned, its results not yet taken (a paced actor between steps), is none."""
        since = self._stepping_since
        if since is not None and self._stepper is not None and self._stepper.ready():
            return None
        return since

    def step(self) -> None:
        if self._stepper is not None:
            self._step_overlapped()
            return
        obs, stopwatch = self._obs, self.stopwatch
        with stopwatch.time("policy"):
            action, extras = self._actor.select_action(obs)
        try:
            with stopwatch.time("env_step"):
                self._stepping_since = time.monotonic()
                try:
                    next_obs, reward, terminated, truncated, info = self._env.step(self._clip(action))
                finally:
                    self._stepping_since = None
        except Exception as e:  # noqa: BLE001 -- named, once, instead of a traceback
            raise RuntimeError(
                f"the environment raised in step() after {self.env_steps} env steps: {type(e).__name__}: {e}"
            ) from e
        returns = self._checked(next_obs, reward, info)
        step = Step(
            obs,
            action,
            reward,
            terminated,
            truncated,
            final_observations(next_obs, terminated, truncated, info),
            extras,
        )
        with stopwatch.time("replay_insert"):
            if self._prefetch:
                cast(_Prefetching, self._actor).observe(step, next_obs, stopwatch)
            else:
                self._actor.observe(step)
        with stopwatch.time("param_fetch"):
            self._actor.update()
        self._count(next_obs, returns, terminated, truncated)

    def _step_overlapped(self) -> None:
        """``step`` with the env stepping elsewhere (``overlap``): the next step's actions are
        sent to the env as soon as they are computed, and the adder's write of this step, the
        params' update and the loop's own work run while the env steps. The actor sees the same
        calls in the same order as in ``step``, except that ``update`` comes after the next
        actions are computed (so they are computed with the params before that update)."""
        obs, stopwatch = self._obs, self.stopwatch
        if self._sent is None:  # (the first step: none in flight yet)
            with stopwatch.time("policy"):
                self._send(*self._actor.select_action(obs))
        action, extras = self._sent  # type: ignore[misc]
        with stopwatch.time("env_step"):
            next_obs, reward, terminated, truncated, info = self._receive()
        returns = self._checked(next_obs, reward, info)
        step = Step(
            obs,
            action,
            reward,
            terminated,
            truncated,
            final_observations(next_obs, terminated, truncated, info),
            extras,
        )

        def send_next() -> None:
            with stopwatch.time("policy"):
                self._send(*self._actor.select_action(next_obs))

        with stopwatch.time("replay_insert"):
            if isinstance(self._actor, BatchedActor):  # (sent before its adder writes)
                self._actor.observe(step, next_obs, stopwatch, before_write=send_next)
            else:
                if self._prefetch:
                    cast(_Prefetching, self._actor).observe(step, next_obs, stopwatch)
                else:
                    self._actor.observe(step)
                send_next()
        with stopwatch.time("param_fetch"):
            self._actor.update()
        self._count(next_obs, returns, terminated, truncated)

    def _send(self, action, extras) -> None:
        """Starts the env's step with ``action`` (the stepper's), and marks it for the stall watch."""
        self._sent = (action, extras)
        self._stepping_since = time.monotonic()
        try:
            self._stepper.send(self._clip(action))  # type: ignore[union-attr]
        except Exception as e:  # noqa: BLE001 -- named, once, instead of a traceback
            self._stepping_since = None
            raise RuntimeError(
                f"the environment raised in step() after {self.env_steps} env steps: {type(e).__name__}: {e}"
            ) from e

    def _receive(self) -> tuple:
        """The step in flight's results; one ``RuntimeError`` line if the env raised, its worker
        ended, or it has not returned within 1.5x the stall bound (the watch ends the process
        first, unless ``on_stall`` does not)."""
        bound = 1.5 * self._step_timeout_s + 1.0
        try:
            return self._stepper.recv(bound)  # type: ignore[union-attr]
        except TimeoutError:
            raise RuntimeError(self.stall_message(bound)) from None
        except Exception as e:  # noqa: BLE001 -- named, once, instead of a traceback
            raise RuntimeError(
                f"the environment raised in step() after {self.env_steps} env steps: {type(e).__name__}: {e}"
            ) from e
        finally:
            self._sent, self._stepping_since = None, None

    def _checked(self, next_obs, reward, info) -> np.ndarray:
        """The episode returns after this step, once its observation and rewards passed the checks."""
        bad = _non_finite_envs(next_obs, self._float_keys) if self._float_keys else None
        if bad:
            raise RuntimeError(
                f"the environment returned a non-finite observation after "
                f"{self.env_steps} env steps (NaN or inf in envs {bad})"
            )
        with np.errstate(over="ignore", invalid="ignore"):  # (an overflow is the check's to report)
            returns = self._returns + info.get("game_reward", reward)  # (the game's own score, where training clips it)
        _check_rewards(reward, returns, self.env_steps)  # (before the actor, and replay, sees the step)
        check_action_mask(next_obs, self.env_steps + self._num_envs, self._actions)
        return returns

    def _count(self, next_obs, returns: np.ndarray, terminated: np.ndarray, truncated: np.ndarray) -> None:
        """The step's bookkeeping: the next observation, returns and lengths, episodes and counts."""
        self._obs = next_obs
        self._returns = returns
        self._lengths += 1
        for i in (terminated | truncated).nonzero()[0]:
            self._finished.append((float(self._returns[i]), int(self._lengths[i])))
            self._returns[i], self._lengths[i] = 0.0, 0
        self.env_steps += self._num_envs
        self._counter.increment(env_steps=self._num_envs)

    def close(self) -> None:
        """Ends the env's worker (``overlap``), if any; the env itself is its owner's to close."""
        self._stepper_finalizer() if self._stepper_finalizer is not None else None

    def log(self, **extra: Any) -> Mapping[str, Any]:
        """Writes one row: counts, steps/s since start, recent episode stats, ``extra``."""
        counts = self._counter.get_counts()
        row: dict[str, Any] = {"env_steps": int(counts.get("env_steps", self.env_steps))}
        row.update({k: v for k, v in counts.items() if k != "env_steps" and not k.startswith("time_s/")})
        now = time.monotonic()
        row["steps_per_s"] = self.env_steps / max(now - self._start, 1e-9)
        seconds = self.stopwatch.snapshot()
        shares = breakdown({k: v - self._last_seconds.get(k, 0.0) for k, v in seconds.items()}, now - self._last_log)
        row.update({f"time_{k}": v for k, v in shares.items()})
        self._last_log, self._last_seconds = now, seconds
        if self._finished:
            row["episode_return"] = float(np.mean([r for r, _ in self._finished]))
            row["episode_length"] = float(np.mean([n for _, n in self._finished]))
            self._finished.clear()
        row.update(extra)
        self._logger.write(row)
        return row


def _watch(loop_ref: weakref.ref[EnvironmentLoop], bound_s: float, on_stall: Callable[[str], None]) -> None:
    """Every ``bound_s / 4`` seconds (at most 1 s), whether the loop's env step has taken longer
    than ``bound_s``: then ``on_stall(line)``, once. Ends with the loop (a weak reference)."""
    while (loop := loop_ref()) is not None:
        since = loop.stuck_since()
        if since is not None and time.monotonic() - since > bound_s:
            on_stall(loop.stall_message(time.monotonic() - since))
            return
        del loop
        time.sleep(min(1.0, bound_s / 4))


def _stalled(line: str) -> None:
    """Ends the process with ``line`` (its env is stuck in a call that cannot be interrupted)."""
    try:
        restore_stderr()  # (the filter's pipe flushed first: the line is the last one)
    finally:
        os.write(2, (line + "\n").encode())
        os._exit(1)


def _env_name(env: gym.vector.VectorEnv) -> str:
    """The env's registered id, or its class's name."""
    spec = getattr(env, "spec", None) or getattr(next(iter(getattr(env, "envs", None) or []), None), "spec", None)
    return getattr(spec, "id", None) or type(getattr(env, "unwrapped", env)).__name__


def _float_keys(observation) -> list:
    """The keys of a dict observation whose arrays are floating point (``[None]`` for one float
    array, ``[]`` when nothing could hold a NaN)."""
    if isinstance(observation, dict):
        return [k for k, x in observation.items() if np.issubdtype(np.asarray(x).dtype, np.floating)]
    return [None] if np.issubdtype(np.asarray(observation).dtype, np.floating) else []


def _non_finite_envs(observation, float_keys: list) -> list[int]:
    """The envs whose observation holds a NaN or an infinity in one of ``float_keys``."""
    bad: set[int] = set()
    for key in float_keys:
        x = np.asarray(observation if key is None else observation[key])
        if not np.isfinite(x).all():
            bad.update(np.nonzero(~np.isfinite(x))[0].tolist())
    return sorted(bad)


def _check_rewards(reward: np.ndarray, returns: np.ndarray, env_steps: int, what: str = "") -> None:
    """Raises the ``RuntimeError`` (one line, naming the envs; ``what``: e.g. ``"evaluation: "``)
    of a reward that is not finite as replay keeps it (float32: NaN, inf, or beyond 3.4e38 such as
    1e308), or of an episode return that is not finite."""
    with np.errstate(over="ignore", invalid="ignore"):
        finite = np.isfinite(np.asarray(reward, np.float32)) & np.isfinite(returns)
    if finite.all():
        return
    bad = np.nonzero(~finite)[0][:4]  # (the first few)
    raise RuntimeError(
        f"{what}the environment's rewards are not finite after {env_steps} env steps (envs "
        f"{bad.tolist()}: rewards {np.asarray(reward)[bad].tolist()}, episode returns "
        f"{returns[bad].tolist()}); a reward must be a finite float32 (|r| < 3.4e38) and an "
        "episode's return finite"
    )


class _EvaluationSteps:
    """What ``_watch`` reads of an evaluation: when its env step began, and the line to end with."""

    def __init__(self, env: gym.vector.VectorEnv, bound_s: float) -> None:
        self._env, self._bound_s = env, bound_s
        self._stepping_since: float | None = None
        self.env_steps = 0

    def stuck_since(self) -> float | None:
        return self._stepping_since

    def stall_message(self, stuck_s: float) -> str:
        return (
            f"shoal: error: an evaluation: the environment's step() ({_env_name(self._env)}) has not returned "
            f"in {stuck_s:.0f} s, after {self.env_steps:,} env steps of the evaluation (SHOAL_STEP_TIMEOUT_S="
            f"{self._bound_s:g}); a stuck environment: its process ends"
        )


_WARNED_CUT: list[bool] = []  # (the cut episodes' warning: once per process)


def _warn_cut(running: np.ndarray, max_length: int, env: gym.vector.VectorEnv) -> None:
    if not _WARNED_CUT:
        _WARNED_CUT.append(True)
        print(
            f"shoal: warning: evaluation episodes of {_env_name(env)} still running after {max_length:,} steps "
            f"(envs {running.nonzero()[0].tolist()}): cut there, their returns so far counted (does the env set "
            "no time limit? SHOAL_EVAL_MAX_EPISODE_STEPS sets the bound)",
            file=sys.stderr,
            flush=True,
        )


def evaluate(
    env: gym.vector.VectorEnv,
    actor: Actor,
    seed: int | None = None,
    should_stop: Callable[[], bool] | None = None,
    lengths: np.ndarray | None = None,
    on_stall: Callable[[str], None] | None = None,
) -> np.ndarray | None:
    """Runs exactly one episode in each env of ``env`` and returns the ``num_envs`` returns
    (``None`` if ``should_stop()`` turned true first: it is asked before every vector step);
    ``lengths`` (``[num_envs]`` integers), if given, gets each episode's length added. An env
    step that has not returned after ``SHOAL_STEP_TIMEOUT_S`` ends the process in one line, as
    in ``EnvironmentLoop`` (``on_stall`` replaces that).

    The actor should hold an evaluation (e.g. greedy) policy and no adder. Envs whose episode
    already ended keep stepping (vector envs step together) but are no longer counted. A reward
    that is not finite, or a return that stops being finite, raises ``RuntimeError`` (one line):
    an evaluation never reports a NaN or infinite return. Episodes still running after
    ``SHOAL_EVAL_MAX_EPISODE_STEPS`` steps (default 100,000: an env with no time limit, played
    well, may never end one) are cut there, their returns so far counted, with one warning line
    per process.
    """
    obs, _ = env.reset(seed=seed)
    check_action_mask(obs, 0, getattr(env, "single_action_space", None))
    actor.end_episodes(np.ones(env.num_envs, bool))  # (every env starts an episode: fresh states)
    watched = _EvaluationSteps(env, float(value("SHOAL_STEP_TIMEOUT_S")))
    threading.Thread(
        target=_watch,
        args=(weakref.ref(watched), watched._bound_s, on_stall or _stalled),
        name="shoal-eval-step-watch",
        daemon=True,
    ).start()
    returns = np.zeros(env.num_envs)
    running = np.ones(env.num_envs, bool)
    clip = action_clipper(env)
    steps = 0  # (env steps of this evaluation, for the mask check's message)
    max_length = int(value("SHOAL_EVAL_MAX_EPISODE_STEPS"))
    while running.any():
        if steps >= max_length * env.num_envs:
            _warn_cut(running, max_length, env)
            break
        if should_stop is not None and should_stop():
            return None
        action, _ = actor.select_action(obs)
        watched._stepping_since = time.monotonic()
        try:
            obs, reward, terminated, truncated, _ = env.step(clip(action))
        finally:
            watched._stepping_since = None
        steps += env.num_envs
        watched.env_steps = steps
        check_action_mask(obs, steps, getattr(env, "single_action_space", None))
        counted = np.where(running, reward, 0.0)
        with np.errstate(over="ignore", invalid="ignore"):  # (an overflow is the check's to report)
            returns += counted
        _check_rewards(counted, returns, steps, "evaluation: ")
        if lengths is not None:
            lengths += running
        running &= ~(terminated | truncated)
        actor.end_episodes(terminated | truncated)
    return returns
