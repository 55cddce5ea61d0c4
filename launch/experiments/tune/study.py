"""A tune directory: its settings (``tune.json``), its Optuna study (``study.db``, SQLite) and
the checks that come before anything is written.

    DIR/tune.json        what the tune runs: agent, env, space, seeds, objective, budget, trials
    DIR/study.db         the Optuna study (``sqlite:///DIR/study.db``, study ``shoal-tune``)
    DIR/trials/<n>/s<seed>/   each trial's run directories (a run's usual files)
    DIR/trials.csv, summary.md, best_preset.json, importance.png   (``report``)

A new tune refuses a directory that holds one already (``--resume DIR`` continues it); a resume
refuses a study of another agent or env than its ``tune.json`` and than the ``--agent``/``--env``
given again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import sqlite3
from collections.abc import Iterator
from typing import Any

from shoal.launch.experiments.tune.spaces import Param, SearchSpace, check_space

STUDY_NAME = "shoal-tune"
SETTINGS_FILE = "tune.json"
STUDY_FILE = "study.db"
OBJECTIVES = ("iqm", "time-to-threshold")


@dataclasses.dataclass(frozen=True)
class TuneSettings:
    """What one tune runs.

    Attributes:
      agent, env_id: the agent and the gymnasium id each trial trains.
      trials: trials to finish (complete or pruned; a failed one counts, an interrupted one not).
      space: the sampled settings (``spaces.SearchSpace``).
      seeds: each trial's seeds, trained one after the other.
      objective: ``iqm`` (the interquartile mean of the seeds' final evaluation returns,
        maximized) or ``time-to-threshold`` (the IQM of env steps until the target return, a
        seed that never reaches it counting its whole budget; minimized).
      preset: the preset the trials start from (``auto``: the env's family's).
      fixed: agent settings every trial has (``--set``), under the sampled ones.
      experiment: experiment settings by flat name (``max_env_steps``, ``eval_every``, ...).
      startup_trials: trials sampled at random before TPE models the others, and finished
        before any is pruned.
      sampler_seed: the TPE sampler's seed (worker ``i`` of ``--jobs``: ``sampler_seed + i``).
      prune: whether a trial may be pruned from its evaluation curve (``iqm`` only).
    """

    agent: str
    env_id: str
    trials: int
    space: SearchSpace
    seeds: tuple[int, ...] = (0,)
    objective: str = "iqm"
    preset: str = "auto"
    fixed: dict[str, Any] = dataclasses.field(default_factory=dict)
    experiment: dict[str, Any] = dataclasses.field(default_factory=dict)
    startup_trials: int = 5
    sampler_seed: int = 0
    prune: bool = True

    @property
    def direction(self) -> str:
        return "maximize" if self.objective == "iqm" else "minimize"

    def record(self) -> dict[str, Any]:
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "space"}
        fixed = {k: list(v) if isinstance(v, tuple) else v for k, v in self.fixed.items()}
        return {**fields, "seeds": list(self.seeds), "fixed": fixed, **self.space.record()}


def settings_from_record(record: dict[str, Any], where: str) -> TuneSettings:
    """The settings a ``tune.json`` holds (its space checked again, as a new tune's is)."""
    from shoal.agents import config_class  # lazy: JAX, off the CLI's path

    try:
        space = check_space(
            record["agent"], config_class(record["agent"]), record["space"], record.get("first_trials", []), where
        )
        fields = {f.name for f in dataclasses.fields(TuneSettings)} - {"space"}
        values = {k: v for k, v in record.items() if k in fields}
        fixed = {k: tuple(v) if isinstance(v, list) else v for k, v in values.get("fixed", {}).items()}
        return TuneSettings(**{**values, "seeds": tuple(values.get("seeds", (0,))), "fixed": fixed, "space": space})
    except (KeyError, TypeError) as e:
        raise ValueError(f"{where}: not a tune's settings ({type(e).__name__}: {e})") from None


def check_settings(settings: TuneSettings, where: str = "the space") -> None:
    """The settings every trial shares, checked before anything is written: the objective, the
    seeds, the agent's fixed settings, and the experiment's (``ExperimentConfig``'s own checks,
    the agent against the env included, on the settings before any is sampled); then each text
    choice of the space alone, for a name the agent does not know (``optimizer: {choices: [adam,
    sgd]}``: the agent's own ``<setting> must be one of ...``), one line naming ``where``. A
    choice refused for another reason may suit another combination (``activation=relu`` with
    ``torso=mlp`` on frames): a sampled combination the agent refuses fails its trial alone."""
    if settings.objective not in OBJECTIVES:
        raise ValueError(f"--objective {settings.objective!r}: expected one of {', '.join(OBJECTIVES)}")
    if not 1 <= settings.trials <= 100_000:
        raise ValueError(f"--trials must be in [1, 100000], got {settings.trials}")
    if not settings.seeds or len(set(settings.seeds)) != len(settings.seeds) or min(settings.seeds) < 0:
        raise ValueError(f"--seeds must be distinct integers >= 0, got {list(settings.seeds)}")
    if not 0 <= settings.startup_trials <= 100_000:
        raise ValueError(f"--startup-trials must be in [0, 100000], got {settings.startup_trials}")
    overlap = sorted(set(settings.fixed) & {p.name for p in settings.space.params})
    if overlap:
        raise ValueError(f"--set {', '.join(overlap)}: the space samples it; drop it from --set or from the space")
    config = trial_config(settings, {}, settings.seeds[0], None)  # (the settings before any is sampled)
    config.validate_settings()
    spec = config.environment_spec()
    config.validate_agent(spec)  # (e.g. a budget below DQN's first update)
    for param in settings.space.params:
        for choice in (c for c in param.choices if isinstance(c, str)):
            try:
                trial_config(settings, {param.name: choice}, settings.seeds[0], None).validate_agent(spec)
            except ValueError as e:
                if f"{param.name} must be one of" in str(e):
                    raise ValueError(f"{where}: {param.name}={choice!r} is refused: {e}") from None


def trial_config(settings: TuneSettings, sampled: dict[str, Any], seed: int, run_dir: str | None, callbacks=()) -> Any:
    """The ``ExperimentConfig`` of one seed of a trial (``sampled``: its settings)."""
    from shoal.launch.experiments.config import experiment_config  # lazy: JAX, off the CLI's path

    return experiment_config(
        settings.agent,
        settings.env_id,
        settings.preset,
        {**settings.fixed, **sampled},
        seed=seed,
        run_dir=run_dir,
        progress=False,
        callbacks=list(callbacks),
        **settings.experiment,
    )


def storage_url(tune_dir: str) -> str:
    return "sqlite:///" + os.path.abspath(os.path.join(tune_dir, STUDY_FILE))


def read_settings(tune_dir: str, named_agent: str | None = None, check: bool = True) -> TuneSettings:
    """The settings of the tune in ``tune_dir`` (one line if it holds none). A plug-in agent
    (``module:Class``) it names is imported only if ``named_agent`` names it again (as
    ``shoal train --resume`` asks of a run's); ``check=False``: read as recorded, nothing
    imported (what ``shoal status`` shows)."""
    path = os.path.join(tune_dir, SETTINGS_FILE)
    try:
        with open(path) as f:
            record = json.load(f)
    except FileNotFoundError:
        raise ValueError(f"{tune_dir!r} is not a tune directory (no {SETTINGS_FILE} in it)") from None
    except (OSError, ValueError) as e:
        raise ValueError(f"cannot read {path}: {getattr(e, 'strerror', None) or e}") from None
    if not isinstance(record, dict) or not isinstance(record.get("agent"), str):
        raise ValueError(f"{path}: not a tune's settings")
    if not check:
        return _recorded(record, path)
    agent = record["agent"]
    if ":" in agent and named_agent != agent:
        raise ValueError(
            f"{path} names the plug-in agent {agent}: name it again (--agent {agent}) to import it for the resume"
        )
    return settings_from_record(record, path)


def _recorded(record: dict[str, Any], where: str) -> TuneSettings:
    """A tune's settings as recorded, its space's settings by name only (unchecked, for reading)."""
    space = record.get("space")
    if not isinstance(space, dict):
        raise ValueError(f"{where}: not a tune's settings (no space)")
    params = tuple(Param(str(name), "recorded") for name in space)
    fields = {f.name for f in dataclasses.fields(TuneSettings)} - {"space"}
    try:
        values = {k: v for k, v in record.items() if k in fields}
        return TuneSettings(**{**values, "seeds": tuple(values.get("seeds", (0,))), "space": SearchSpace(params)})
    except TypeError as e:
        raise ValueError(f"{where}: not a tune's settings ({e})") from None


def check_new_directory(tune_dir: str, agent: str) -> None:
    """A new tune's directory: absent, empty, or not yet a tune's (one line otherwise)."""
    if os.path.exists(os.path.join(tune_dir, STUDY_FILE)) or os.path.exists(os.path.join(tune_dir, SETTINGS_FILE)):
        found = study_agent(tune_dir)
        if found is not None and found != agent:
            raise ValueError(f"{tune_dir}/{STUDY_FILE} is a study of {found}, not {agent}: choose another --out")
        raise ValueError(
            f"{tune_dir} holds a tune already: continue it with shoal tune --resume {tune_dir}, or choose another --out"
        )
    if os.path.exists(tune_dir) and not os.path.isdir(tune_dir):
        raise ValueError(f"--out {tune_dir}: exists and is not a directory")


def study_agent(tune_dir: str) -> str | None:
    """The agent the study file in ``tune_dir`` records (``None``: no study there), read with
    SQLite alone (no Optuna needed, nothing written)."""
    path = os.path.join(tune_dir, STUDY_FILE)
    if not os.path.isfile(path):
        return None
    try:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
            row = db.execute("SELECT value_json FROM study_user_attributes WHERE key = 'agent'").fetchone()
    except sqlite3.Error as e:
        raise ValueError(f"{path}: not an Optuna study file ({e})") from None
    return json.loads(row[0]) if row else None


def check_resumed(tune_dir: str, settings: TuneSettings, agent: str | None, env_id: str | None) -> None:
    """A resume's checks: the study file is this tune's, and ``--agent``/``--env`` given again
    name the tune's own."""
    found = study_agent(tune_dir)
    if found is not None and found != settings.agent:
        raise ValueError(
            f"{tune_dir}/{STUDY_FILE} is a study of {found}, but {SETTINGS_FILE} tunes {settings.agent}: "
            "the study file comes from another tune"
        )
    if agent is not None and agent != settings.agent:
        raise ValueError(f"--resume {tune_dir}: its study tunes {settings.agent}, not --agent {agent}")
    if env_id is not None and env_id != settings.env_id:
        raise ValueError(f"--resume {tune_dir}: its study tunes on {settings.env_id}, not --env {env_id}")


def create(tune_dir: str, settings: TuneSettings) -> None:
    """Writes ``tune.json`` and creates the study (its first trials enqueued)."""
    import optuna  # lazy: optional extra (tune)

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # (shoal tune prints its own lines)
    os.makedirs(tune_dir, exist_ok=True)
    with open(os.path.join(tune_dir, SETTINGS_FILE), "w") as f:
        json.dump(settings.record(), f, indent=2)
        f.write("\n")
    study = optuna.create_study(study_name=STUDY_NAME, storage=storage_url(tune_dir), direction=settings.direction)  # type: ignore[arg-type]  # (checked: minimize|maximize)
    study.set_user_attr("agent", settings.agent)
    study.set_user_attr("env_id", settings.env_id)
    study.set_user_attr("objective", settings.objective)
    for trial in settings.space.first_trials:
        study.enqueue_trial({k: str(list(v)) if isinstance(v, tuple) else v for k, v in trial.items()})


def load(tune_dir: str, sampler: Any = None, pruner: Any = None) -> Any:
    """The study of ``tune_dir`` (Optuna's ``Study``)."""
    import optuna  # lazy: optional extra (tune)

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.load_study(study_name=STUDY_NAME, storage=storage_url(tune_dir), sampler=sampler, pruner=pruner)


@contextlib.contextmanager
def locked(tune_dir: str, name: str = ".lock", wait: bool = False) -> Iterator[None]:
    """Holds ``tune_dir/name`` locked (``wait``: until it is free; else one line when another
    ``shoal tune`` holds it)."""
    with open(os.path.join(tune_dir, name), "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ValueError(f"{tune_dir} is being tuned by another shoal tune process (it holds {name})") from None
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
