"""Where a PettingZoo env comes from: the constructor a ``pettingzoo:<module>[:<function>]`` id
names (checked before it is imported and called: ``shoal.envs.env_sources``), its arguments
checked, and the env it makes as a parallel env (an AEC env converted) or, for self-play, as
the AEC env it is. ``shoal.envs.multiagent`` lays these envs out as rows (and exports
``env_maker`` and ``is_pettingzoo`` too).
"""

from __future__ import annotations

import functools
import importlib
import inspect
import types
from collections.abc import Callable, Mapping
from typing import Any

from shoal.envs.env_sources import check_env_callable, check_env_module

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
