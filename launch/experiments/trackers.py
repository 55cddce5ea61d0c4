"""Tracking backends: Weights & Biases (``--track wandb``, the ``wandb`` extra) and MLflow
(``--track mlflow``, the ``mlflow`` extra). Each is driven by one ``tracking.RunTracker`` in the
process that launched the run; nodes never open a tracking run of their own.

A backend (``Backend``) is started once, sent logs and videos, and finished with the result.

Tracking contacts only what the user configured (W&B's servers, or ``MLFLOW_TRACKING_URI``):
W&B's error reports to its own Sentry are off unless ``WANDB_ERROR_REPORTING`` says otherwise,
and an MLflow server that does not answer costs a few seconds and one warning line, not
MLflow's seven retries over two minutes, each a line on stderr (``MLFLOW_HTTP_REQUEST_*``
variables the user sets are kept).
"""

from __future__ import annotations

import abc
import importlib.util
import logging
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any


def check_backend(name: str) -> None:
    """A ``ValueError`` unless ``name`` is a backend (``BACKENDS``) whose extra is installed."""
    if name not in BACKENDS:
        raise ValueError(f"track must be one of {', '.join(BACKENDS)} (or None: no tracking), got {name!r}")
    try:  # (found, not imported: importing wandb or mlflow takes a second or two of the run's start)
        found = importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise ValueError(
            f"--track {name} needs the '{name}' extra, which is not installed; run "
            f"pip install -e '.[{name}]' (from the Shoal repository)"
        )


def flatten(value: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a/b": 1}``."""
    flat: dict[str, Any] = {}
    for key, item in value.items():
        if isinstance(item, Mapping):
            flat.update(flatten(item, f"{prefix}{key}/"))
        else:
            flat[f"{prefix}{key}"] = item
    return flat


class Backend(abc.ABC):
    """What ``tracking.RunTracker`` calls, in this order: ``start``, then ``log`` and ``video``
    any number of times, then ``finish``."""

    @abc.abstractmethod
    def start(self, run_dir: str, config: dict[str, Any], resume_id: str | None) -> str:
        """Opens the tracking run of ``run_dir`` with ``config`` (its ``config.json``); returns
        its id. ``resume_id``: the id a previous process of this run directory recorded, whose
        run this one continues."""

    @abc.abstractmethod
    def log(self, label: str, rows: Sequence[dict[str, float]]) -> None:
        """Rows of one CSV log (``label``, e.g. ``train``): each value as ``<label>/<column>``,
        against the row's ``env_steps``."""

    @abc.abstractmethod
    def video(self, path: str, env_steps: int) -> None:
        """The evaluation video at ``path``, recorded at ``env_steps``."""

    @abc.abstractmethod
    def finish(self, result: dict[str, Any] | None) -> None:
        """Closes the run with the run's ``result`` as its summary (``None``: the run failed)."""

    @abc.abstractmethod
    def where(self) -> str:
        """Where the run can be seen, for the line that says it started."""


# MLflow's HTTP settings (its environment variables) unless the user set them: 2 retries, 1 s
# backoff, a 10 s request timeout (MLflow's own: 7, 2 s, 120 s).
MLFLOW_HTTP = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "10",
}


class WandbBackend(Backend):
    """A W&B run named after the run directory, in project ``$WANDB_PROJECT`` (default
    ``shoal``), grouped by agent and env; its files under ``<run_dir>/wandb``. ``WANDB_MODE``
    (e.g. ``offline``) and the other ``WANDB_*`` variables apply as usual; its error reporting
    (``WANDB_ERROR_REPORTING``) is off unless set."""

    def start(self, run_dir: str, config: dict[str, Any], resume_id: str | None) -> str:
        # (before wandb is imported: its Sentry reporter, and the wandb-core service it starts,
        # read it once)
        os.environ.setdefault("WANDB_ERROR_REPORTING", "false")
        import wandb  # lazy: optional extra (wandb)

        self._wandb = wandb
        self._run = wandb.init(
            project=os.environ.get("WANDB_PROJECT", "shoal"),
            name=os.path.basename(os.path.abspath(run_dir)),
            group=f"{config.get('agent')}-{config.get('env_id')}",
            job_type="train",
            dir=run_dir,
            config=config,
            id=resume_id,
            resume="allow" if resume_id else None,
            settings=wandb.Settings(console="off"),
        )  # (the run's stdout/stderr stay the run's own)
        self._labels: set[str] = set()
        return self._run.id

    def _define(self, label: str) -> None:
        """Each log's curves against its own ``env_steps`` column."""
        if label not in self._labels:
            self._labels.add(label)
            self._run.define_metric(f"{label}/env_steps")
            self._run.define_metric(f"{label}/*", step_metric=f"{label}/env_steps")

    def log(self, label: str, rows: Sequence[dict[str, float]]) -> None:
        self._define(label)
        for row in rows:
            self._run.log({f"{label}/{key}": value for key, value in row.items()})

    def video(self, path: str, env_steps: int) -> None:
        self._define("eval")
        self._run.log({"eval/video": self._wandb.Video(path, format="mp4"), "eval/env_steps": env_steps})

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
        for name, value in MLFLOW_HTTP.items():
            os.environ.setdefault(name, value)
        from mlflow import MlflowClient  # lazy: optional extra (mlflow)
        from mlflow.entities import Metric, Param  # lazy: optional extra (mlflow)

        for name in ("mlflow", "alembic"):
            logging.getLogger(name).setLevel(logging.WARNING)
        logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)  # (a line per retry: the failure is one)
        given = os.environ.get("MLFLOW_TRACKING_URI")
        self._uri = given or f"sqlite:///{os.path.abspath('mlflow.db')}"
        self._client = client = MlflowClient(tracking_uri=self._uri)
        self._metric = Metric
        self._run_dir = run_dir
        if resume_id is not None:
            client.update_run(resume_id, status="RUNNING")
            self._id = resume_id
            return resume_id
        name = os.environ.get("MLFLOW_EXPERIMENT_NAME", "shoal")
        experiment = client.get_experiment_by_name(name)
        if experiment is None:
            artifacts = None if given else os.path.abspath("mlartifacts")  # (beside the default store)
            experiment_id = client.create_experiment(name, artifact_location=artifacts)
        else:
            experiment_id = experiment.experiment_id
        run = client.create_run(
            experiment_id,
            run_name=os.path.basename(os.path.abspath(run_dir)),
            tags={"agent": str(config.get("agent")), "env": str(config.get("env_id"))},
        )
        self._id = run.info.run_id
        params = [Param(key[:250], str(value)[:6000]) for key, value in flatten(config).items()]
        for first in range(0, len(params), 100):  # (MLflow takes at most 100 params a call)
            client.log_batch(self._id, params=params[first : first + 100])
        client.log_artifact(self._id, os.path.join(run_dir, "config.json"))
        return self._id

    def _log_metrics(self, values: Sequence[tuple[str, float, int]]) -> None:
        """``(key, value, step)`` triples, in batches of MLflow's most (1000 a call)."""
        now = int(time.time() * 1000)
        metrics = [self._metric(key, value, now, step) for key, value, step in values]
        for first in range(0, len(metrics), 1000):
            self._client.log_batch(self._id, metrics=metrics[first : first + 1000])

    def log(self, label: str, rows: Sequence[dict[str, float]]) -> None:
        self._log_metrics(
            [(f"{label}/{key}", value, int(row.get("env_steps", 0))) for row in rows for key, value in row.items()]
        )

    def video(self, path: str, env_steps: int) -> None:
        self._client.log_artifact(self._id, path, "videos")

    def finish(self, result: dict[str, Any] | None) -> None:
        if result is not None:  # its numbers at the run's last env step, and the file
            step = int(result.get("env_steps") or 0)
            self._log_metrics(
                [
                    (key, float(value), step)
                    for key, value in flatten(result, "result/").items()
                    if isinstance(value, (int, float)) and not isinstance(value, bool)
                ]
            )
            if os.path.exists(os.path.join(self._run_dir, "result.json")):
                self._client.log_artifact(self._id, os.path.join(self._run_dir, "result.json"))
        self._client.set_terminated(self._id, "FINISHED" if result is not None else "FAILED")

    def where(self) -> str:
        return f"MLflow run {self._id} in {self._uri}"


BACKENDS: dict[str, type[Backend]] = {"wandb": WandbBackend, "mlflow": MlflowBackend}  # (each its extra's module name)
