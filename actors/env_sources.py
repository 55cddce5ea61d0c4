"""Where an experiment's environment comes from, beside a plain registered id: arguments for
the id's constructor (``gym.make(env_id, **env_args)``; ``shoal train --env-arg KEY=VALUE``),
or a factory of the user's (``"module:function"`` or an importable callable) that returns a
gymnasium env with the user's wrappers, called as ``factory(**env_args)``.

Processes and Ray nodes get the factory by reference (its import path), so it must be defined
at the top level of an importable module; a run records that path in ``config.json`` and a
resumed run imports it again.
"""

from __future__ import annotations

import ast
import inspect
import math
from typing import Any, Callable, Mapping

import gymnasium as gym

from shoal.core.importing import import_attribute

EnvFactory = Callable[..., gym.Env]
MAKE_ARGS = ("max_episode_steps", "render_mode")  # what gym.make itself takes beside the env's own


def parse_env_value(text: str) -> Any:
    """``--env-arg`` values: a Python literal (``3``, ``0.5``, ``"x"``, ``(1, 2)``, ``None``),
    ``true``/``false`` as booleans, anything else the string itself."""
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def load_env_factory(factory: str | EnvFactory) -> EnvFactory:
    """The callable ``factory`` names (``"module:function"``), or ``factory`` itself."""
    if callable(factory):
        return factory
    if not isinstance(factory, str) or factory.count(":") != 1 or not all(factory.partition(":")[::2]):
        raise ValueError(f"env_factory must be a callable or 'module:function', got {factory!r}")
    module_name, _, name = factory.partition(":")
    target = import_attribute(module_name, name, f"env_factory {factory!r}")
    if not callable(target):
        raise ValueError(f"env_factory {factory!r}: {module_name} has no callable {name!r}")
    return target


def factory_path(factory: str | EnvFactory | None) -> str | None:
    """How a run records ``factory``: its ``module:function`` path (``None``: no factory)."""
    if factory is None or isinstance(factory, str):
        return factory
    return f"{factory.__module__}:{factory.__qualname__}"


def _parameters(env_id: str) -> dict[str, inspect.Parameter] | None:
    """The keyword parameters ``env_id``'s constructor takes (``None``: any, or unknown)."""
    try:
        creator = gym.spec(env_id).entry_point
        creator = gym.envs.registration.load_env_creator(creator) if isinstance(creator, str) else creator
        parameters = inspect.signature(creator).parameters.values()
    except Exception:  # noqa: BLE001 -- a constructor we cannot read: gym.make will say
        return None
    if any(p.kind == p.VAR_KEYWORD for p in parameters):
        return None
    return {p.name: p for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}


def _accepted(env_id: str) -> list[str] | None:
    """The keyword arguments ``env_id``'s constructor takes (``None``: any, or unknown)."""
    parameters = _parameters(env_id)
    return None if parameters is None else sorted(parameters)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_env_args(env_id: str, env_args: Mapping[str, Any]) -> None:
    """Raises ``ValueError`` naming an argument ``env_id``'s constructor does not take (and
    those it does), or a value for an argument whose default is a number that is not a finite
    number (a string such as ``float('nan')``, which ``--env-arg`` reads as text, or ``1e999``):
    the env would take it and fail at its first step, after the run directory is written."""
    parameters = _parameters(env_id)
    accepted = sorted({*parameters, *MAKE_ARGS}) if parameters is not None else None
    unknown = sorted(set(env_args) - set(accepted)) if accepted is not None else []
    if unknown:
        raise ValueError(f"{env_id} takes no argument {', '.join(repr(k) for k in unknown)} (--env-arg); "
                         f"its arguments: {', '.join(accepted) or 'none'}")
    for key, value in env_args.items():
        default = parameters[key].default if parameters and key in parameters else None
        if _is_number(default) and not (_is_number(value) and math.isfinite(value)):
            raise ValueError(f"{env_id}'s argument {key} is a number (default {default!r}); --env-arg "
                             f"{key}={value!r} is not a finite number")


def make_single_env(env_id: str, env_args: Mapping[str, Any] | None = None,
                    env_factory: str | EnvFactory | None = None) -> gym.Env:
    """One env: ``env_factory(**env_args)`` if a factory is given, else ``gym.make(env_id,
    **env_args)``; a factory that returns something else than a ``gymnasium.Env``, or
    arguments the env refuses (a ``TypeError``, ``ValueError`` or failed assertion in its
    constructor: LunarLander's ``gravity=5``), raise one line (``ValueError``)."""
    env_args = dict(env_args or {})
    name = factory_path(env_factory) or env_id
    if env_factory is None:
        check_env_args(env_id, env_args)
        make: EnvFactory = lambda: gym.make(env_id, **env_args)  # noqa: E731
    else:
        factory = load_env_factory(env_factory)
        make = lambda: factory(**env_args)  # noqa: E731
    try:
        env = make()
    except (TypeError, ValueError, AssertionError) as e:  # (arguments the constructor refuses, or asserts against)
        raise ValueError(f"{name} with arguments {env_args}: {type(e).__name__}: {e}") from e
    if not isinstance(env, gym.Env):
        raise ValueError(f"env_factory {name!r} returned {type(env).__name__}, not a gymnasium.Env")
    return env
