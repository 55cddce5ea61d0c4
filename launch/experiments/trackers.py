"""Tracking backends: Weights & Biases (``--track wandb``, the ``wandb`` extra) and MLflow
(``--track mlflow``, the ``mlflow`` extra). Each is driven by one ``tracking.RunTracker`` in the
process that launched the run; nodes never open a tracking run of their own.

A backend has five calls: ``start`` (returns the backend's run id; given the id a previous
process of the same run directory recorded, it continues that run), ``log`` (rows of one CSV
log, e.g. ``train``, each logged as ``<label>/<column>`` against ``<label>/env_steps``),
``video``, ``finish`` (the result, as the run's summary) -- and ``where``, a line saying where
the run can be seen.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import time
from typing import Any, Mapping, Sequence

BACKENDS = ("wandb", "mlflow")
_MODULES = {"wandb": "wandb", "mlflow": "mlflow"}


def check_backend(name: str) -> None:
    """A ``ValueError`` unless ``name`` is a backend whose extra is installed."""
    if name not in BACKENDS:
        raise ValueError(f"track must be one of {', '.join(BACKENDS)} (or None: no tracking), got {name!r}")
    try:  # (found, not imported: importing wandb or mlflow takes a second or two of the run's start)
        found = importlib.util.find_spec(_MODULES[name]) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise ValueError(f"--track {name} needs the '{name}' extra, which is not installed; run "
                         f"pip install -e '.[{name}]' (from the Shoal repository)")


def flatten(value: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a/b": 1}``."""
    flat: dict[str, Any] = {}
    for key, item in value.items():
        if isinstance(item, Mapping):
            flat.update(flatten(item, f"{prefix}{key}/"))
        else:
            flat[f"{prefix}{key}"] = item
    return flat


class Backend:
    """What ``tracking.RunTracker`` calls, in this order: ``start``, ``log`` and ``video`` any
    number of times, ``finish`` (``result`` ``None``: the run failed)."""

    def start(self, run_dir: str, config: dict[str, Any], resume_id: str | None) -> str:
        raise NotImplementedError

    def log(self, label: str, rows: Sequence[dict[str, float]]) -> None:
        raise NotImplementedError

    def video(self, path: str, env_steps: int) -> None:
        raise NotImplementedError

    def finish(self, result: dict[str, Any] | None) -> None:
        raise NotImplementedError

    def where(self) -> str:
        raise NotImplementedError


class WandbBackend(Backend):
    """A W&B run named after the run directory, in project ``$WANDB_PROJECT`` (default
    ``shoal``), grouped by agent and env; its files under ``<run_dir>/wandb``. ``WANDB_MODE``
    (e.g. ``offline``) and the other ``WANDB_*`` variables apply as usual."""

    def start(self, run_dir: str, config: dict[str, Any], resume_id: str | None) -> str:
        import wandb

        self._run = wandb.init(
            project=os.environ.get("WANDB_PROJECT", "shoal"), name=os.path.basename(os.path.abspath(run_dir)),
            group=f"{config.get('agent')}-{config.get('env_id')}", job_type="train", dir=run_dir,
            config=config, id=resume_id, resume="allow" if resume_id else None,
            settings=wandb.Settings(console="off"))  # (the run's stdout/stderr stay the run's own)
        self._labels: set[str] = set()
        return self._run.id

    def log(self, label: str, rows: Sequence[dict[str, float]]) -> None:
        if label not in self._labels:  # each log's curves against its own env_steps column
            self._labels.add(label)
            self._run.define_metric(f"{label}/env_steps")
            self._run.define_metric(f"{label}/*", step_metric=f"{label}/env_steps")
        for row in rows:
            self._run.log({f"{label}/{key}": value for key, value in row.items()})

    def video(self, path: str, env_steps: int) -> None:
        import wandb

        self.log("eval", [])  # (eval/* against eval/env_steps, if no eval row came first)
        self._run.log({"eval/video": wandb.Video(path, format="mp4"), "eval/env_steps": env_steps})

    def finish(self, result: dict[str, Any] | None) -> None:
        if result is not None:
            self._run.summary.update(flatten(result, "result/"))
        self._run.finish(exit_code=0 if result is not None else 1)

    def where(self) -> str:
        return f"W&B run {self._run.id} ({getattr(self._run, 'url', None) or self._run.dir})"


class MlflowBackend(Backend):
    """An MLflow run named after the run directory, in experiment ``$MLFLOW_EXPERIMENT_NAME``
    (default ``shoal``) of the store ``$MLFLOW_TRACKING_URI``, by default a local one in the
    working directory: ``sqlite:///mlflow.db`` with artifacts in ``mlartifacts/`` (see it with
    ``mlflow ui --backend-store-uri sqlite:///mlflow.db``). Metrics are stepped by env steps;
    config settings are params (on the run's first start), videos and ``config.json``/
    ``result.json`` artifacts."""

    def start(self, run_dir: str, config: dict[str, Any], resume_id: str | None) -> str:
        from mlflow import MlflowClient
        from mlflow.entities import Param

        for name in ("mlflow", "alembic"):
            logging.getLogger(name).setLevel(logging.WARNING)
        self._uri = os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{os.path.abspath('mlflow.db')}"
        self._client = client = MlflowClient(tracking_uri=self._uri)
        self._run_dir = run_dir
        if resume_id is not None:
            client.update_run(resume_id, status="RUNNING")
            self._id = resume_id
            return resume_id
        name = os.environ.get("MLFLOW_EXPERIMENT_NAME", "shoal")
        experiment = client.get_experiment_by_name(name)
        if experiment is None:
            local = None if os.environ.get("MLFLOW_TRACKING_URI") else os.path.abspath("mlartifacts")
            experiment_id = client.create_experiment(name, artifact_location=local)
        else:
            experiment_id = experiment.experiment_id
        run = client.create_run(experiment_id, run_name=os.path.basename(os.path.abspath(run_dir)),
                                tags={"agent": str(config.get("agent")), "env": str(config.get("env_id"))})
        self._id = run.info.run_id
        params = [Param(key[:250], str(value)[:6000]) for key, value in flatten(config).items()]
        for first in range(0, len(params), 100):  # (MLflow takes at most 100 params a call)
            client.log_batch(self._id, params=params[first:first + 100])
        client.log_artifact(self._id, os.path.join(run_dir, "config.json"))
        return self._id

    def log(self, label: str, rows: Sequence[dict[str, float]]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(f"{label}/{key}", value, now, int(row.get("env_steps", 0)))
                   for row in rows for key, value in row.items()]
        for first in range(0, len(metrics), 1000):  # (at most 1000 metrics a call)
            self._client.log_batch(self._id, metrics=metrics[first:first + 1000])

    def video(self, path: str, env_steps: int) -> None:
        self._client.log_artifact(self._id, path, "videos")

    def finish(self, result: dict[str, Any] | None) -> None:
        from mlflow.entities import Metric

        if result is not None:  # its numbers at the run's last env step, and the file
            now, step = int(time.time() * 1000), int(result.get("env_steps") or 0)
            metrics = [Metric(key, float(value), now, step) for key, value in flatten(result, "result/").items()
                       if isinstance(value, (int, float)) and not isinstance(value, bool)]
            self._client.log_batch(self._id, metrics=metrics[:1000])
            if os.path.exists(os.path.join(self._run_dir, "result.json")):
                self._client.log_artifact(self._id, os.path.join(self._run_dir, "result.json"))
        self._client.set_terminated(self._id, "FINISHED" if result is not None else "FAILED")

    def where(self) -> str:
        return f"MLflow run {self._id} in {self._uri}"


def make_backend(name: str) -> Backend:
    return {"wandb": WandbBackend, "mlflow": MlflowBackend}[name]()
