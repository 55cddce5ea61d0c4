"""Where an experiment's environment comes from, beside a plain registered id: arguments for
the id's constructor (``gym.make(env_id, **env_args)``; ``shoal train --env-arg KEY=VALUE``),
or a factory of the user's (``"module:function"`` or an importable callable) that returns a
gymnasium env with the user's wrappers, called as ``factory(**env_args)``.

Processes and Ray nodes get the factory by reference (its import path), so it must be defined
at the top level of an importable module; a run records that path in ``config.json`` and a
resumed run imports it again.

What a named env source (``--env-factory``, ``--env module:EnvId``, ``--env pettingzoo:...``)
refuses is a deny-list, not a proof that it makes an env (``check_env_module``,
``check_env_callable``): a module of Python's standard library is refused before it is imported,
and a built-in (``os.system``) or a function of the standard library (``shutil.rmtree``), or
something that is no function at all, is refused before it is called, each in one ``ValueError``
line naming it. Any other named function (a Python function or method, an env class, a
``functools.partial`` of one, an instance of a class of yours with ``__call__``) is called as the
user asked.
"""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import math
import sys
import types
from collections.abc import Callable, Mapping
from typing import Any, cast

import gymnasium as gym
from gymnasium.envs.registration import load_env_creator

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


def _standard(module: str | None) -> bool:
    """Whether ``module`` (a dotted name) is part of Python's standard library, or built in."""
    if not module:
        return False
    return module.split(".")[0] in sys.stdlib_module_names or module in sys.builtin_module_names


def check_env_module(module: str, what: str) -> None:
    """Refuses (one-line ``ValueError``, naming ``what``) a module of Python's standard library,
    before it is imported: none is an env's (``antigravity`` opens a browser, ``this`` prints).
    A ``.py`` file's path is the user's own module."""
    if not module.endswith(".py") and _standard(module):
        raise ValueError(
            f"{what}: {module} is a module of Python's standard library, not an env's; name a "
            "module of yours or of an env package"
        )


def check_env_callable(target: Any, name: str, what: str, classes: tuple[type, ...] = ()) -> None:
    """Refuses (one-line ``ValueError``, naming ``what``) ``target``, attribute ``name`` of a
    module, unless it is a Python function (or method), a subclass of ``classes``, a
    ``functools.partial`` of one, or an instance whose class has a Python ``__call__``, defined
    outside the standard library (a deny-list: see the module doc). Checked before it is called."""
    if isinstance(target, functools.partial):  # (what it calls is its function: checked as named)
        check_env_callable(target.func, name, what, classes)
        return
    call = getattr(type(target), "__call__", None)  # noqa: B004 -- the function itself, not whether it is callable
    if not inspect.isclass(target) and not inspect.isroutine(target) and inspect.isfunction(call):
        check_env_callable(call, name, what)  # (an instance of a class of Python code: its __call__ is called)
        return
    function = getattr(target, "__func__", target)  # (a classmethod's function)
    where = getattr(target, "__module__", None)
    where = "os" if where in ("posix", "nt") else where  # (os.system's own module)
    full = f"{where}.{getattr(target, '__qualname__', name)}" if where else name
    if inspect.isbuiltin(function) or inspect.ismethoddescriptor(function):
        raise ValueError(
            f"{what}: {name} is {full}, a built-in function, not an env's maker; nothing is called "
            "but a function of Python code or an env class"
        )
    if inspect.isclass(target):
        if classes and not issubclass(target, classes):
            raise ValueError(
                f"{what}: {name} is the class {full}, not a subclass of {' or '.join(c.__name__ for c in classes)}"
            )
    elif not inspect.isfunction(function):
        raise ValueError(f"{what}: {name} is a {type(target).__name__}, not a function that makes an env")
    if _standard(where):
        raise ValueError(f"{what}: {name} is {full}, a function of Python's standard library, not an env's maker")


def load_env_factory(factory: str | EnvFactory) -> EnvFactory:
    """The callable ``factory`` names (``"module:function"``: checked, ``check_env_module`` and
    ``check_env_callable``), or ``factory`` itself."""
    if callable(factory):
        return factory
    if not isinstance(factory, str) or factory.count(":") != 1 or not all(factory.partition(":")[::2]):
        raise ValueError(f"env_factory must be a callable or 'module:function', got {factory!r}")
    module_name, _, name = factory.partition(":")
    what = f"env_factory {factory!r}"
    check_env_module(module_name, what)
    target = import_attribute(module_name, name, what)
    if not callable(target):
        raise ValueError(f"env_factory {factory!r}: {module_name} has no callable {name!r}")
    check_env_callable(target, name, what, (gym.Env,))
    return target


def factory_path(factory: str | EnvFactory | None) -> str | None:
    """How a run records ``factory``: its ``module:function`` path (``None``: no factory)."""
    if factory is None or isinstance(factory, str):
        return factory
    return f"{factory.__module__}:{factory.__qualname__}"


def _parameters(env_id: str) -> dict[str, inspect.Parameter] | None:
    """The keyword parameters ``env_id``'s constructor takes (``None``: any, or unknown)."""
    try:
        entry_point = gym.spec(env_id).entry_point
        creator = load_env_creator(entry_point) if isinstance(entry_point, str) else entry_point
        parameters = inspect.signature(cast(Callable[..., Any], creator)).parameters.values()  # (None: raises)
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
        raise ValueError(
            f"{env_id} takes no argument {', '.join(repr(k) for k in unknown)} (--env-arg); "
            f"its arguments: {', '.join(accepted or ()) or 'none'}"
        )
    for key, value in env_args.items():
        default = parameters[key].default if parameters and key in parameters else None
        if _is_number(default) and not (_is_number(value) and math.isfinite(value)):
            raise ValueError(
                f"{env_id}'s argument {key} is a number (default {default!r}); --env-arg "
                f"{key}={value!r} is not a finite number"
            )


def make_single_env(
    env_id: str, env_args: Mapping[str, Any] | None = None, env_factory: str | EnvFactory | None = None
) -> gym.Env:
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


# --- PettingZoo's sources
# Where a PettingZoo env comes from: the constructor a ``pettingzoo:<module>[:<function>]`` id
# names (checked before it is imported and called, as above), its arguments
# checked, and the env it makes as a parallel env (an AEC env converted) or, for self-play, as
# the AEC env it is. ``shoal.envs.multiagent`` lays these envs out as rows (and exports
# ``env_maker`` and ``is_pettingzoo`` too).

PREFIX = "pettingzoo:"


def is_pettingzoo(env_id: Any) -> bool:
    """Whether ``env_id`` names a PettingZoo env (``pettingzoo:<module>[:<function>]``)."""
    return isinstance(env_id, str) and env_id.startswith(PREFIX)


def _pettingzoo() -> Any:
    """PettingZoo's two env classes and its AEC-to-parallel conversion (the pettingzoo extra, which
    importing a ``pettingzoo:`` id's module has already required)."""
    from pettingzoo.utils import conversions, env  # lazy: optional extra (pettingzoo)

    return types.SimpleNamespace(
        AECEnv=env.AECEnv, ParallelEnv=env.ParallelEnv, aec_to_parallel=conversions.aec_to_parallel
    )


def _constructor(env_id: str) -> Callable[..., Any]:
    """The constructor a ``pettingzoo:`` id names; one-line ``ValueError`` if bad."""
    target = env_id[len(PREFIX) :]
    module_name, _, function = target.partition(":")
    if not module_name or ":" in function or module_name.startswith("."):
        raise ValueError(
            f"environment id {env_id!r} is neither pettingzoo:<module> (e.g. "
            "pettingzoo:mpe2.simple_spread_v3) nor pettingzoo:<module>:<function>"
        )
    what = f"environment {env_id!r}"
    check_env_module(module_name, what)  # (before it is imported)
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ValueError(
            f"{what}: cannot import {module_name} ({e}); PettingZoo's own "
            "envs need the pettingzoo extra: pip install 'shoal[pettingzoo]'"
        ) from None
    if function:
        make = getattr(module, function, None)
        if not callable(make):
            raise ValueError(f"{what}: {module_name} has no function {function!r}")
    else:
        function = next((name for name in ("parallel_env", "env") if callable(getattr(module, name, None))), "")
        if not function:
            raise ValueError(
                f"{what}: {module_name} has neither parallel_env() nor env() "
                "(PettingZoo's parallel and AEC constructors)"
            )
        make = getattr(module, function)
    check_env_callable(make, function, what, (_pettingzoo().ParallelEnv, _pettingzoo().AECEnv))  # (before it is called)
    return make  # (the env it makes says which API it has)


def _as_parallel(env: Any, env_id: str) -> Any:
    """``env`` as a PettingZoo parallel env (an AEC env converted), or a one-line ``ValueError``."""
    pettingzoo = _pettingzoo()
    if isinstance(env, pettingzoo.ParallelEnv) or (
        hasattr(env, "possible_agents") and hasattr(env, "step") and not isinstance(env, pettingzoo.AECEnv)
    ):
        return env
    if isinstance(env, pettingzoo.AECEnv):
        try:
            return pettingzoo.aec_to_parallel(env)
        except AssertionError as e:  # (PettingZoo refuses envs whose agents act in turns)
            env.close()
            reason = " ".join(str(e).split())
            raise ValueError(
                f"environment {env_id!r} is an AEC env that cannot be converted to the parallel "
                f"API ({reason[:160]}); a turn-based game trains by self-play: --self-play"
            ) from None
    raise ValueError(
        f"environment {env_id!r} made a {type(env).__name__}, not a PettingZoo env (pettingzoo.ParallelEnv or AECEnv)"
    )


def env_maker(env_id: str, env_args: Mapping[str, Any] | None = None, turns: bool = False) -> Callable[[], Any]:
    """A function that makes one parallel env of ``env_id`` with ``env_args`` (checked now:
    unknown keyword arguments are refused in one line); ``turns``: one AEC env, as it is (a
    turn-based game, for ``shoal.envs.selfplay``)."""
    make = _constructor(env_id)
    env_args = dict(env_args or {})
    parameters: Mapping[str, inspect.Parameter]
    try:
        parameters = inspect.signature(make).parameters
    except (TypeError, ValueError):
        parameters = {}
    if parameters and not any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
        unknown = sorted(set(env_args) - set(parameters))
        if unknown:
            raise ValueError(
                f"environment {env_id!r} takes no argument(s) {', '.join(unknown)}; it takes: "
                f"{', '.join(parameters) or 'none'}"
            )

    return functools.partial(_make_turns if turns else _make, make, env_id, env_args)


def _called(make: Callable[..., Any], env_id: str, env_args: Mapping[str, Any]) -> Any:
    """``make(**env_args)``; arguments it refuses (a ``TypeError``, ``ValueError`` or failed
    assertion: a ``**kwargs`` function passes them on) are one line naming the env and them."""
    try:
        return make(**env_args)
    except (TypeError, ValueError, AssertionError) as e:
        raise ValueError(f"environment {env_id!r} with arguments {dict(env_args)}: {type(e).__name__}: {e}") from e


def _make(make: Callable[..., Any], env_id: str, env_args: Mapping[str, Any]) -> Any:
    return _as_parallel(_called(make, env_id, env_args), env_id)


def _make_turns(make: Callable[..., Any], env_id: str, env_args: Mapping[str, Any]) -> Any:
    env = _called(make, env_id, env_args)
    if not isinstance(env, _pettingzoo().AECEnv):
        env.close()
        raise ValueError(
            f"--self-play takes a turn-based game (a PettingZoo AEC env, e.g. "
            f"pettingzoo.classic.connect_four_v3); {env_id} made {type(env).__name__}, a parallel env"
        )
    return env
