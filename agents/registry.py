"""The agents ``shoal train --agent AGENT`` knows: the built-in ones by name, plug-ins by name
(installed packages that declare them in the ``shoal.agents`` entry-point group), and any
builder class by its import path ``module:Class``. Packages load on first use.

A plug-in is an ``AgentBuilder`` subclass whose config is a dataclass, declared either as the
class attribute ``config_class`` or by annotating ``config`` (``config: MyConfig``). It may
carry presets in a class attribute ``presets`` (a sequence of ``shoal.agents.presets.Preset``).
A package declares one in its ``pyproject.toml``::

    [project.entry-points."shoal.agents"]
    qrdqn = "my_package.qrdqn:QRDQNBuilder"

A run records its agent as it was named (``qrdqn``, or ``my_package.qrdqn:QRDQNBuilder``), so
``--resume`` finds it again without being told.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.metadata
import typing
from typing import Any

from shoal.agents.builders import AgentBuilder, BuilderError, raised
from shoal.core.importing import import_attribute

# The built-in agents, named as a plug-in names itself in its entry point (``module:Class``) and
# loaded the same way: the builder class declares its config (the ``config`` annotation) and its
# presets (the ``presets`` attribute).
_AGENTS = {
    "dqn": "shoal.agents.dqn:DQNBuilder",
    "ppo": "shoal.agents.ppo:PPOBuilder",
    "impala": "shoal.agents.impala:IMPALABuilder",
    "sac": "shoal.agents.sac:SACBuilder",
    "r2d2": "shoal.agents.r2d2:R2D2Builder",
    "bc": "shoal.agents.bc:BCBuilder",
    "cql": "shoal.agents.cql:CQLBuilder",
    "iql": "shoal.agents.iql:IQLBuilder",
}
ENTRY_POINT_GROUP = "shoal.agents"


def _plugins() -> dict[str, str]:
    """Plug-in name -> ``module:Class``, from installed packages' ``shoal.agents`` entry points
    (a built-in's name is never taken over)."""
    return {
        ep.name: ep.value for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP) if ep.name not in _AGENTS
    }


def registered_agents() -> list[str]:
    """The agents known by name: the built-in ones and the installed plug-ins."""
    return sorted({*_AGENTS, *_plugins()})


def builtin_agents() -> list[str]:
    return sorted(_AGENTS)


def _import_builder(path: str, agent: str) -> type:
    module_name, _, attribute = path.partition(":")
    if not module_name or not attribute or ":" in attribute:
        raise ValueError(
            f"agent {agent!r} is neither a registered name ({', '.join(registered_agents())}) nor "
            "module:BuilderClass (e.g. my_package.qrdqn:QRDQNBuilder)"
        )
    target = import_attribute(module_name, attribute, f"agent {agent!r}")
    if target is None:
        raise ValueError(f"agent {agent!r}: module {module_name!r} has no {attribute!r}")
    return target


def declared_config_class(builder_cls: Any, agent: str) -> type:
    """The config dataclass builder class ``builder_cls`` declares (its ``config_class``, or
    its ``config`` annotation); ``ValueError`` naming what is wrong if it breaks the contract."""
    if not (isinstance(builder_cls, type) and issubclass(builder_cls, AgentBuilder)):
        raise ValueError(f"agent {agent!r} is {builder_cls!r}, not a subclass of shoal.agents.AgentBuilder")
    config_cls = getattr(builder_cls, "config_class", None)
    if config_cls is None:
        try:
            config_cls = typing.get_type_hints(builder_cls).get("config")
        except Exception:  # noqa: BLE001 -- an annotation that does not resolve: said below
            config_cls = None
    if not (isinstance(config_cls, type) and dataclasses.is_dataclass(config_cls)):
        raise ValueError(
            f"agent {agent!r}: {builder_cls.__name__} must declare its config dataclass "
            f"(config_class = MyConfig, or the annotation config: MyConfig); found {config_cls!r}"
        )
    missing = sorted(getattr(builder_cls, "__abstractmethods__", ()))
    if missing:
        raise ValueError(
            f"agent {agent!r}: {builder_cls.__name__} does not define {', '.join(missing)} "
            "(every abstract AgentBuilder factory must be)"
        )
    return config_cls


@functools.cache
def _load(name: str) -> tuple[type, type]:
    """``(builder class, config class)`` of agent ``name`` (a built-in, a plug-in, ``module:Class``)."""
    path = _AGENTS.get(name) or _plugins().get(name, name)
    if ":" not in path:
        raise ValueError(
            f"unknown agent {name!r}; available: {', '.join(registered_agents())}, or "
            "module:BuilderClass for a builder of your own"
        )
    builder_cls = _import_builder(path, name)
    return builder_cls, declared_config_class(builder_cls, name)


def builder_class(name: str) -> type:
    """The ``AgentBuilder`` subclass of agent ``name``."""
    return _load(name)[0]


def config_class(name: str) -> type:
    """The config dataclass of agent ``name``."""
    return _load(name)[1]


def agent_name(builder: AgentBuilder) -> str:
    """The name a run records for ``builder`` (what ``--resume`` loads again): the name it was
    got by (``get_builder``), else a built-in's or a plug-in's name, else ``module:Class``."""
    given = getattr(builder, "_agent_name", None)
    if given:
        return given
    cls = type(builder)
    for name, path in _AGENTS.items():
        package, _, attribute = path.partition(":")
        if cls.__module__.startswith(package + ".") and cls.__name__ == attribute:
            return name
    path = f"{cls.__module__}:{cls.__qualname__}"
    return next((name for name, value in _plugins().items() if value == path), path)


def get_builder(name: str, **config_overrides: Any) -> AgentBuilder:
    """The builder of agent ``name`` (a registered name or ``module:BuilderClass``) with its
    default config, updated by ``config_overrides``."""
    builder_cls, config_cls = _load(name)
    known = {f.name for f in dataclasses.fields(config_cls)}
    unknown = sorted(set(config_overrides) - known)
    if unknown:
        raise ValueError(f"unknown {name} setting(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    try:
        builder = builder_cls(config_cls(**config_overrides))
    except (ValueError, RuntimeError, OSError):
        raise
    except (Exception, SystemExit) as e:  # noqa: BLE001 -- a plug-in's constructor: one line, as its factories
        raise BuilderError(
            f"agent {name!r}: {builder_cls.__name__}({config_cls.__name__}(...)) raised {raised(e)} "
            "(--verbose shows the traceback)"
        ) from e
    builder._agent_name = name
    return builder
