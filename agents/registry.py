"""The agents ``shoal train --agent NAME`` knows, by name. Packages load on first use."""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any

from shoal.agents.builders import AgentBuilder

# name -> (package, builder class, config class)
_AGENTS = {
    "dqn": ("shoal.agents.dqn", "DQNBuilder", "DQNConfig"),
    "ppo": ("shoal.agents.ppo", "PPOBuilder", "PPOConfig"),
    "impala": ("shoal.agents.impala", "IMPALABuilder", "IMPALAConfig"),
    "sac": ("shoal.agents.sac", "SACBuilder", "SACConfig"),
}


def registered_agents() -> list[str]:
    return sorted(_AGENTS)


def _load(name: str) -> tuple[type, type]:
    if name not in _AGENTS:
        raise ValueError(f"unknown agent {name!r}; available: {', '.join(registered_agents())}")
    package, builder, config = _AGENTS[name]
    module = importlib.import_module(package)
    return getattr(module, builder), getattr(module, config)


def config_class(name: str) -> type:
    """The config dataclass of agent ``name``."""
    return _load(name)[1]


def get_builder(name: str, **config_overrides: Any) -> AgentBuilder:
    """The builder of agent ``name`` with its default config, updated by ``config_overrides``."""
    builder_cls, config_cls = _load(name)
    known = {f.name for f in dataclasses.fields(config_cls)}
    unknown = sorted(set(config_overrides) - known)
    if unknown:
        raise ValueError(f"unknown {name} setting(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    return builder_cls(config_cls(**config_overrides))
