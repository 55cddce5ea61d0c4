"""``shoal tune --launcher ray``: a tune's trials as Ray tasks, on a Ray cluster or a local Ray.

    shoal tune --agent ppo --env gymnax:CartPole-v1 --trials 32 --jobs 8 --launcher ray --ray-address auto

The study stays where the tune runs: a ``StudyHost`` actor, placed on this (the driver's) node,
holds it (``DIR/study.db``, SQLite, which is never opened from another host) and answers every
trial's questions -- its sampled settings, each evaluation's report and the pruner's verdict,
its outcome -- so that a trial anywhere on the cluster is pruned from its curve as a local one
is. Each trial is one Ray task of one CPU that trains its seeds one after the other, as ``--jobs``
workers do (``trials.run_trial``, the same code); at most ``--jobs`` run at once (at most the
cluster's CPUs). Its run directories are ``DIR/trials/<n>/s<seed>`` as the task's node sees
``DIR``: on a cluster (``--ray-address``) ``DIR`` must be storage every host mounts (checked
before anything is written, as ``shoal train --launcher ray`` checks a run directory).

SIGTERM (or Ctrl-C) stops the running trials (each asks the study every ``STOP_POLL_S`` whether
the tune stops, and stops its run as a ``--jobs`` worker does on SIGTERM; one that has not ended
``STOP_TIMEOUT_S`` later is killed): each is ``interrupted`` (failed, not counted; ``--resume``
runs another in its place); the finished ones are kept and the reports written. A task
that dies (its node lost, its process killed) fails its trial with the reason. Without
``--ray-address`` a local Ray is started with this machine's CPUs and shut down at the end.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from typing import Any

from shoal.launch.experiments.tune import study as studies
from shoal.launch.experiments.tune.study import TuneSettings
from shoal.launch.experiments.tune.trials import counted, interrupted, run_trial, sampler_and_pruner

HOST_TIMEOUT_S = 120.0  # the longest a call of the study's actor may take (it is on this node)
STOP_TIMEOUT_S = 60.0  # how long stopped trials have to end (a compiled loop's part: ~2 s) before they are killed
STOP_POLL_S = 0.5  # how often a trial asks whether the tune stops


def join_cluster(ray_address: str | None, tune_dir: str, jobs: int, flag: str = "--out") -> None:
    """Connects to Ray (``None``: a local Ray of this machine's CPUs) and checks that the
    cluster has ``jobs`` CPUs and, where it has more than one node, that every node sees
    ``tune_dir`` (given as ``flag``); every refusal one ``ValueError``, before anything is written."""
    try:
        import ray  # lazy: optional extra (ray)

        from shoal.launch.programs.ray.cluster import check_shared_directory, connect  # lazy: optional extra (ray)
    except ImportError:
        raise ValueError(
            "shoal tune --launcher ray needs the 'ray' extra, which is not installed; run pip install 'shoal[ray]'"
        ) from None
    connect(ray_address)
    cpus = int(ray.cluster_resources().get("CPU", 0))
    if not 1 <= jobs <= cpus:
        where = f"the Ray cluster at {ray_address}" if ray_address else "the local Ray"
        raise ValueError(f"--jobs must be in [1, {cpus}] with --launcher ray ({where} has {cpus} CPUs), got {jobs}")
    if ray_address or sum(1 for node in ray.nodes() if node.get("Alive")) > 1:
        check_shared_directory(tune_dir, flag=flag)


def leave_cluster() -> None:
    """Shuts down the local Ray ``join_cluster`` started (a cluster's Ray is left running)."""
    from shoal.launch.programs.ray.cluster import shutdown_local, started_local  # lazy: optional extra (ray)

    if started_local():
        shutdown_local()


class StudyHost:
    """The tune's study, served to the trials (a Ray actor on the driver's node; its calls run
    one at a time). Trials are named by their numbers; ``call`` runs one of an asked trial's
    methods (``suggest_float``, ``report``, ``should_prune``, ``set_user_attr``)."""

    def __init__(self, tune_dir: str, settings: TuneSettings) -> None:
        self.tune_dir, self.settings = tune_dir, settings
        self.study = studies.load(tune_dir)
        existing = len(self.study.get_trials(deepcopy=False))
        self.study.sampler, self.study.pruner = sampler_and_pruner(settings, 0, existing)
        self.trials: dict[int, Any] = {}
        self.stopping = False

    def stop(self) -> None:
        """The tune stops: every running trial is to stop (``should_stop``)."""
        self.stopping = True

    def should_stop(self) -> bool:
        return self.stopping

    def ask(self) -> int | None:
        """A new trial's number, or ``None`` when the tune has its trials."""
        with studies.locked(self.tune_dir, ".ask.lock", wait=True):  # (as --jobs workers ask)
            if counted(self.study) >= self.settings.trials:
                return None
            trial = self.study.ask()
        self.trials[trial.number] = trial
        return trial.number

    def call(self, number: int, name: str, args: tuple, kwargs: dict) -> Any:
        return getattr(self.trials[number], name)(*args, **kwargs)

    def tell(self, number: int, values: Any = None, state: Any = None) -> None:
        self.study.tell(self.trials[number], values, state=state)
        del self.trials[number]  # (after the tell: one that failed leaves the trial to ``end``)

    def end(self, number: int, error: str | None = None) -> str:
        """Fails trial ``number`` if it is still running: ``error`` (its task failed) or none
        (interrupted: not counted); returns how it ended (``complete``, ``pruned``, ``failed``,
        ``interrupted``)."""
        import optuna  # lazy: optional extra (tune)

        trial = self.trials.get(number)
        if trial is not None:
            if error:
                trial.set_user_attr("error", error.splitlines()[0])
            self.study.tell(trial, state=optuna.trial.TrialState.FAIL, skip_if_finished=True)
            del self.trials[number]
        frozen = self.study.get_trials(deepcopy=False)[number]
        if interrupted(frozen):
            return "interrupted"
        return {"COMPLETE": "complete", "PRUNED": "pruned"}.get(frozen.state.name, "failed")


class RemoteTrial:
    """An asked trial as ``run_trial`` uses it, its methods run by the ``StudyHost``."""

    def __init__(self, host: Any, number: int) -> None:
        self.host, self.number = host, number

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name.startswith("_"):
            raise AttributeError(name)

        def method(*args: Any, **kwargs: Any) -> Any:
            return _get(self.host.call.remote(self.number, name, args, kwargs), f"trial {self.number}'s {name}")

        return method


class RemoteStudy:
    """The study as ``run_trial`` uses it: ``tell``, answered by the ``StudyHost``."""

    def __init__(self, host: Any) -> None:
        self.host = host

    def tell(self, trial: RemoteTrial, values: Any = None, state: Any = None) -> None:
        _get(self.host.tell.remote(trial.number, values, state), f"trial {trial.number}'s outcome")


def _get(ref: Any, what: str, timeout_s: float = HOST_TIMEOUT_S) -> Any:
    """``ref``'s value; an exception the actor raised is raised here as itself (Optuna's
    ``ValueError``, as ``run_trial`` expects it), not Ray's wrapper with its header line."""
    import ray  # lazy: optional extra (ray)

    try:
        return ray.get(ref, timeout=timeout_s)
    except ray.exceptions.GetTimeoutError:
        raise TimeoutError(f"the tune's study did not answer {what} within {timeout_s:.0f} s") from None
    except ray.exceptions.RayTaskError as e:
        if isinstance(e.cause, Exception):
            raise e.cause from None
        raise


def _task_error(error: Exception) -> str:
    """One line for a trial task that raised: its own exception, or how Ray lost it."""
    import ray  # lazy: optional extra (ray)

    cause = error.cause if isinstance(error, ray.exceptions.RayTaskError) else None
    if isinstance(cause, BaseException):
        return f"{type(cause).__name__}: {_first_line(cause)}"
    return f"its Ray task died: {_first_line(error) or type(error).__name__}"


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else ""


def trial_task(tune_dir: str, settings: TuneSettings, host: Any, number: int) -> str:
    """One trial, in a Ray task: its seeds trained here, its study questions sent to ``host``;
    returns its state's name."""
    from shoal.launch.experiments.compilation_cache import enable_compilation_cache  # lazy: JAX

    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # (trials may share a GPU)
    enable_compilation_cache()
    stop, ended = threading.Event(), threading.Event()
    threading.Thread(target=_watch, args=(host, stop, ended), name="tune-stop-watch", daemon=True).start()
    try:
        return run_trial(tune_dir, settings, RemoteStudy(host), RemoteTrial(host, number), stop)
    finally:
        ended.set()


def _watch(host: Any, stop: threading.Event, ended: threading.Event) -> None:
    """Sets ``stop`` once the tune stops (or its study's actor is gone), until ``ended``."""
    import ray  # lazy: optional extra (ray)

    while not ended.wait(STOP_POLL_S):
        try:
            stopping = ray.get(host.should_stop.remote(), timeout=HOST_TIMEOUT_S)
        except (ray.exceptions.RayError, TimeoutError):  # (the driver is gone: nothing to report to)
            stopping = True
        if stopping:
            stop.set()
            return


def run_on_ray(
    tune_dir: str, settings: TuneSettings, jobs: int, stop: threading.Event, on_trial: Callable[[int, str], None]
) -> None:
    """Runs the tune's trials as Ray tasks, ``jobs`` at once, until it has its trials or
    ``stop`` is set (``on_trial(number, state)`` after each); Ray is joined already."""
    import ray  # lazy: optional extra (ray)
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # lazy: optional extra (ray)

    here = NodeAffinitySchedulingStrategy(node_id=ray.get_runtime_context().get_node_id(), soft=False)
    host: Any = ray.remote(num_cpus=0)(StudyHost).options(scheduling_strategy=here).remote(tune_dir, settings)
    task = ray.remote(num_cpus=1, max_retries=0)(trial_task)
    running: dict[Any, int] = {}
    try:
        while True:
            while not stop.is_set() and len(running) < jobs:
                number = _get(host.ask.remote(), "a new trial")
                if number is None:
                    break
                try:
                    running[task.remote(tune_dir, settings, host, number)] = number
                except Exception as e:  # (not submitted: its trial fails, not left running)
                    _get(host.end.remote(number, f"its Ray task could not start: {e}"), f"trial {number}'s failure")
                    raise
            if not running or stop.is_set():
                return
            done, _ = ray.wait(list(running), num_returns=1, timeout=0.2)  # (a stop is seen within 0.2 s)
            for ref in done:
                number = running.pop(ref)
                try:
                    state = ray.get(ref)
                except ray.exceptions.RayError as e:  # (it raised, or its process or node died)
                    _get(host.end.remote(number, _task_error(e)), f"trial {number}'s failure")
                    state = "failed"
                on_trial(number, state)
    finally:
        if running:  # (each trial stops its run, tells the study and returns; the stuck are killed)
            host.stop.remote()
            hurry = getattr(stop, "hurry", None)  # (a second signal: kill them now)
            waited = 0.0
            pending = list(running)
            while pending and waited < STOP_TIMEOUT_S and not (hurry is not None and hurry.is_set()):
                _, pending = ray.wait(pending, num_returns=len(pending), timeout=0.2)
                waited += 0.2
            for ref in pending:
                ray.cancel(ref, force=True)
        for number in running.values():
            state = _get(host.end.remote(number), f"trial {number}'s interruption")
            print(f"shoal tune: trial {number} {state}", file=sys.stderr, flush=True)
        ray.kill(host)
