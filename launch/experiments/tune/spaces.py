"""Search spaces of ``shoal tune``: which agent settings a tune samples, and from where.

A space maps agent config fields (``agents/<agent>/config.py``) to a range or a list of choices::

    learning_rate: {low: 1.0e-5, high: 1.0e-2, log: true}   # a float field: sampled in [low, high]
    n_step: {low: 1, high: 5}                                # an int field: an integer in [low, high]
    hidden_sizes: {choices: [[64, 64], [256, 256]]}          # any field: one of the choices

A file (``--space``) is YAML (``space:`` and an optional ``first_trials:``, a list of settings
tried first, before the sampler picks any) or Python (module-level ``SPACE`` and optional
``FIRST_TRIALS``). ``DEFAULT_SPACES`` holds each built-in agent's space (the docs' table).

``check_space`` refuses, in one line each, a field the agent has not, a range that is empty or
outside the field's accepted range, a range or choice of the wrong type, and a first trial
outside the space: before any trial starts.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import os
import runpy
import typing
from collections.abc import Mapping, Sequence
from typing import Any

from shoal.core.settings import Range

# Each built-in agent's default space: the settings that matter most and their usual ranges
# (after RL-Zoo's samplers, ``rl_zoo3/hyperparams_opt.py``), around the agent's defaults.
DEFAULT_SPACES: dict[str, dict[str, dict[str, Any]]] = {
    "dqn": {
        "learning_rate": {"low": 1e-4, "high": 1e-2, "log": True},
        "batch_size": {"choices": [32, 64, 128, 256]},
        "discount": {"choices": [0.95, 0.98, 0.99, 0.995]},
        "n_step": {"low": 1, "high": 5},
        "target_update_period": {"choices": [50, 100, 500, 1000]},
        "samples_per_insert": {"choices": [8.0, 16.0, 32.0, 64.0]},
        "epsilon_decay_steps": {"low": 1_000, "high": 50_000, "log": True},
        "hidden_sizes": {"choices": [[64, 64], [128, 128], [256, 256]]},
    },
    "ppo": {
        "learning_rate": {"low": 1e-5, "high": 3e-3, "log": True},
        "rollout_length": {"choices": [16, 32, 64, 128, 256]},
        "num_epochs": {"low": 1, "high": 10},
        "num_minibatches": {"choices": [1, 2, 4, 8]},
        "discount": {"choices": [0.95, 0.98, 0.99, 0.995, 0.999]},
        "gae_lambda": {"choices": [0.9, 0.95, 0.98, 1.0]},
        "clip_epsilon": {"choices": [0.1, 0.2, 0.3]},
        "entropy_coef": {"low": 1e-4, "high": 0.1, "log": True},
        "max_gradient_norm": {"choices": [0.3, 0.5, 1.0, 5.0]},
    },
    "impala": {
        "learning_rate": {"low": 1e-4, "high": 1e-2, "log": True},
        "rollout_length": {"choices": [8, 16, 32]},
        "sequences_per_update": {"choices": [8, 16, 32]},
        "discount": {"choices": [0.95, 0.98, 0.99, 0.995]},
        "entropy_coef": {"low": 1e-4, "high": 0.1, "log": True},
        "baseline_coef": {"choices": [0.25, 0.5, 1.0]},
    },
    "sac": {
        "learning_rate": {"low": 1e-4, "high": 3e-3, "log": True},
        "batch_size": {"choices": [64, 128, 256, 512]},
        "discount": {"choices": [0.98, 0.99, 0.995]},
        "tau": {"choices": [0.001, 0.005, 0.01, 0.02]},
        "hidden_sizes": {"choices": [[64, 64], [256, 256], [400, 300]]},
        "samples_per_insert": {"choices": [64.0, 128.0, 256.0]},
    },
    "r2d2": {
        "learning_rate": {"low": 1e-4, "high": 3e-3, "log": True},
        "n_step": {"low": 1, "high": 5},
        "burn_in_length": {"choices": [0, 5, 10, 20]},
        "target_update_period": {"choices": [50, 100, 500]},
        "lstm_size": {"choices": [32, 64, 128]},
        "samples_per_insert": {"choices": [4.0, 8.0, 16.0]},
    },
}


@dataclasses.dataclass(frozen=True)
class Param:
    """One sampled setting: ``kind`` ``"float"``, ``"int"`` (``low``..``high``, ``log``) or
    ``"categorical"`` (``choices``; a list choice is a tuple field's value)."""

    name: str
    kind: str
    low: float | None = None
    high: float | None = None
    log: bool = False
    choices: tuple[Any, ...] = ()

    def suggest(self, trial: Any) -> Any:
        """The value an Optuna ``trial`` samples (a list choice travels as text: Optuna's
        choices are scalars)."""
        if self.kind == "float":
            return trial.suggest_float(self.name, self.low, self.high, log=self.log)
        if self.kind == "int":
            return trial.suggest_int(self.name, int(self.low), int(self.high), log=self.log)  # type: ignore[arg-type]  # (an int range has both)
        encoded = {_encode(c): c for c in self.choices}
        return encoded[trial.suggest_categorical(self.name, list(encoded))]

    def record(self) -> dict[str, Any]:
        """As in a space file."""
        if self.kind == "categorical":
            return {"choices": [list(c) if isinstance(c, tuple) else c for c in self.choices]}
        return {"low": self.low, "high": self.high, **({"log": True} if self.log else {})}


def _encode(value: Any) -> Any:
    """A choice as Optuna stores it: a list (a tuple field's value) as its text, ``"[64, 64]"``."""
    return str(list(value)) if isinstance(value, tuple) else value


@dataclasses.dataclass(frozen=True)
class SearchSpace:
    """The sampled settings of one agent, and the settings tried first."""

    params: tuple[Param, ...]
    first_trials: tuple[dict[str, Any], ...] = ()

    def sample(self, trial: Any) -> dict[str, Any]:
        """The agent settings of an Optuna ``trial``."""
        return {p.name: p.suggest(trial) for p in self.params}

    def record(self) -> dict[str, Any]:
        return {
            "space": {p.name: p.record() for p in self.params},
            "first_trials": [{k: _plain(v) for k, v in t.items()} for t in self.first_trials],
        }


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def load_space_file(path: str) -> tuple[Mapping[str, Any], Sequence[Mapping[str, Any]]]:
    """``(space, first_trials)`` of a ``.yaml``/``.yml`` or ``.py`` file."""
    if not os.path.isfile(path):
        raise ValueError(f"--space {path}: no such file (a .yaml or .py search space)")
    if path.endswith(".py"):
        module = runpy.run_path(path)  # (the user's own code, as --agent module:Class is)
        space, first = module.get("SPACE"), module.get("FIRST_TRIALS", [])
        if not isinstance(space, Mapping):
            raise ValueError(f"--space {path}: defines no SPACE dict (field -> {{low, high}} or {{choices}})")
    elif path.endswith((".yaml", ".yml")):
        import yaml  # lazy: PyYAML, not a dependency (YAML files only)

        try:
            with open(path) as f:
                data = yaml.safe_load(f)
        except (OSError, yaml.YAMLError) as e:
            raise ValueError(f"--space {path}: cannot read it: {e}".splitlines()[0]) from None
        if not isinstance(data, Mapping) or not isinstance(data.get("space"), Mapping):
            raise ValueError(f"--space {path}: expected a mapping with a 'space:' key (field -> {{low, high}})")
        unknown = sorted(set(data) - {"space", "first_trials"})
        if unknown:
            raise ValueError(f"--space {path}: unknown key(s) {', '.join(unknown)} (accepted: space, first_trials)")
        space, first = data["space"], data.get("first_trials") or []
    else:
        raise ValueError(f"--space {path}: expected a .yaml, .yml or .py file")
    if not isinstance(first, Sequence) or not all(isinstance(t, Mapping) for t in first):
        raise ValueError(f"--space {path}: first_trials must be a list of mappings (field -> value)")
    return space, first


def check_space(
    agent: str,
    config_cls: type,
    space: Mapping[str, Any],
    first_trials: Sequence[Mapping[str, Any]] = (),
    where: str = "the space",
) -> SearchSpace:
    """The ``SearchSpace`` of ``space`` for ``agent``'s config dataclass, or a one-line
    ``ValueError`` naming what is wrong (``where``: how the message names the space)."""
    fields = {f.name: f for f in dataclasses.fields(config_cls)}
    hints = typing.get_type_hints(config_cls)
    if not space:
        raise ValueError(f"{where} samples nothing: name at least one setting of {agent}")
    params = []
    for name, spec in space.items():
        if name not in fields:
            raise ValueError(
                f"{where}: {name!r} is not a setting of {agent}; its settings: {', '.join(sorted(fields))}"
            )
        params.append(_param(f"{where}: {name}", name, spec, hints[name], fields[name].metadata.get("range")))
    by_name = {p.name: p for p in params}
    for i, trial in enumerate(first_trials):
        for name, value in trial.items():
            if name not in by_name:
                raise ValueError(f"{where}: first_trials[{i}] sets {name!r}, which the space does not sample")
            if not _inside(by_name[name], value):
                raise ValueError(
                    f"{where}: first_trials[{i}]: {name}={value!r} is outside its range {by_name[name].record()}"
                )
    return SearchSpace(tuple(params), tuple({k: _tuple(v) for k, v in t.items()} for t in first_trials))


def _tuple(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def _inside(param: Param, value: Any) -> bool:
    if param.kind == "categorical":
        return _tuple(value) in param.choices
    return _number(value, param.kind == "int") and param.low <= value <= param.high


def _number(x: Any, integer: bool) -> bool:
    if isinstance(x, bool):
        return False
    return isinstance(x, numbers.Integral) if integer else isinstance(x, numbers.Real) and math.isfinite(x)


def _as_number(x: Any) -> Any:
    """A number, or text that reads as one (YAML reads ``1e-5`` as text: write ``1.0e-5``)."""
    if isinstance(x, str):
        try:
            return int(x) if x.strip().lstrip("-").isdigit() else float(x)
        except ValueError:
            return x
    return x


def _param(what: str, name: str, spec: Any, hint: Any, accepted: Range | None) -> Param:
    args = typing.get_args(hint)
    base = next((a for a in args if a is not type(None)), hint) if type(None) in args else hint
    kind = typing.get_origin(base) or base
    if not isinstance(spec, Mapping):
        raise ValueError(f"{what}: expected {{low: .., high: ..}} or {{choices: [..]}}, got {spec!r}")
    unknown = sorted(set(spec) - {"low", "high", "log", "choices"})
    if unknown:
        raise ValueError(f"{what}: unknown key(s) {', '.join(unknown)} (accepted: low, high, log, choices)")
    if "choices" in spec:
        choices = spec["choices"]
        if not isinstance(choices, (list, tuple)) or not choices:
            raise ValueError(f"{what}: choices must be a non-empty list, got {choices!r}")
        checked = tuple(_choice(what, _as_number(c) if kind in (int, float) else c, kind, accepted) for c in choices)
        return Param(name, "categorical", choices=checked)
    if kind not in (int, float):
        raise ValueError(f"{what}: {_article(kind)} setting takes choices: [..], not a range")
    if "low" not in spec or "high" not in spec:
        raise ValueError(f"{what}: a range needs both low and high, got {dict(spec)!r}")
    low, high, log = _as_number(spec["low"]), _as_number(spec["high"]), spec.get("log", False)
    for bound in (low, high):
        if not _number(bound, kind is int):
            expected = "an integer" if kind is int else "a number"
            raise ValueError(f"{what}: {_article(kind)} setting's range takes {expected}, got {bound!r}")
    if not isinstance(log, bool):
        raise ValueError(f"{what}: log must be true or false, got {log!r}")
    if not low < high:
        raise ValueError(f"{what}: the range [{low}, {high}] is empty (low must be below high)")
    if log and low <= 0:
        raise ValueError(f"{what}: a log range must be above 0, got low={low}")
    if accepted is not None and not (accepted.contains(low) and accepted.contains(high)):
        raise ValueError(f"{what}: [{low}, {high}] leaves the setting's accepted range {accepted.describe()}")
    return Param(
        name,
        "int" if kind is int else "float",
        float(low) if kind is float else low,
        float(high) if kind is float else high,
        log,
    )


def _article(kind: Any) -> str:
    name = getattr(kind, "__name__", str(kind))
    return f"an {name}" if name[0] in "aeiou" else f"a {name}"


def _choice(what: str, value: Any, kind: Any, accepted: Range | None) -> Any:
    """One choice, checked as the field takes it."""
    if kind is tuple:
        if not isinstance(value, (list, tuple)) or not value or not all(_number(v, True) for v in value):
            raise ValueError(f"{what}: each choice must be a non-empty list of integers, got {value!r}")
        value = tuple(value)
        numbers_in = value
    elif kind is bool:
        if not isinstance(value, bool):
            raise ValueError(f"{what}: a bool setting's choices are true or false, got {value!r}")
        return value
    elif kind in (int, float):
        if not _number(value, kind is int):
            raise ValueError(
                f"{what}: {_article(kind)} setting's choice must be {'an integer' if kind is int else 'a number'}, got {value!r}"
            )
        value = float(value) if kind is float else value
        numbers_in = (value,)
    else:
        if not isinstance(value, kind if isinstance(kind, type) else object):
            raise ValueError(f"{what}: {_article(kind)} setting's choices must be of its type, got {value!r}")
        return value
    if accepted is not None and not all(accepted.contains(x) for x in numbers_in):
        raise ValueError(
            f"{what}: the choice {list(value) if kind is tuple else value!r} leaves the setting's accepted range {accepted.describe()}"
        )
    return value
