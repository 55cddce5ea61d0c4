"""Presets: tuned settings of an agent for a family of tasks, chosen by the environment id.

An agent declares its presets in its builder class's ``presets`` attribute (the built-in ones
list theirs in their package's ``presets.py``; a plug-in as it likes), each naming the
published settings it comes from. A preset sets agent config fields (``settings``) and may set
the experiment's too (``experiment``: envs per actor, evaluation interval and size, a budget).
The family of a gymnasium id is read off its registered entry point:

    classic -- gymnasium.envs.classic_control (CartPole, Acrobot, Pendulum, ...)
    box2d   -- gymnasium.envs.box2d (LunarLander, BipedalWalker, ...)
    mujoco  -- gymnasium.envs.mujoco (HalfCheetah, Hopper, ...)
    atari   -- ale_py (ALE/<Game>-v5)
    minatar -- minatar (MinAtar/<Game>-v1: 10x10 binary planes; the minatar extra)
    memory  -- tasks that need memory: Shoal's own (shoal/CartPoleNoVelocity-v1) and popgym's

``shoal train`` applies the preset of the env's family by default (``--preset NAME`` picks one,
``--preset none`` keeps the agent's plain defaults); ``--set`` overrides any field after it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from shoal.agents.registry import builder_class, builtin_agents

FAMILIES = {
    "gymnasium.envs.classic_control": "classic",
    "gymnasium.envs.box2d": "box2d",
    "gymnasium.envs.mujoco": "mujoco",
    "ale_py": "atari",
    "shimmy.atari": "atari",
    "minatar": "minatar",
    "shoal.envs.memory_tasks": "memory",
    "popgym": "memory",
}


@dataclasses.dataclass(frozen=True)
class Preset:
    """Tuned settings of ``agent`` for a task ``family`` (``source``: where they come from)."""

    agent: str
    family: str
    source: str
    settings: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    experiment: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.agent}/{self.family}"


def task_family(env_id: str) -> str | None:
    """The family of a registered gymnasium id (``None`` for one outside those above)."""
    import gymnasium as gym

    from shoal.envs.environments import is_atari, resolve_env_id

    if is_atari(env_id):
        return "atari"
    try:
        entry_point = str(gym.spec(resolve_env_id(env_id)).entry_point)
    except (ValueError, gym.error.Error):
        return None
    return next((family for prefix, family in FAMILIES.items() if entry_point.startswith(prefix)), None)


def presets(agent: str | None = None) -> list[Preset]:
    """Every preset (of ``agent``)."""
    agents = [agent] if agent is not None else builtin_agents()
    found = []
    for name in agents:
        builder = builder_class(name)  # an unknown agent: one line naming the known ones
        found += list(getattr(builder, "presets", ()))  # (built-in or plug-in alike)
    return found


def find_preset(agent: str, env_id: str, name: str | None = "auto") -> Preset | None:
    """``agent``'s preset: for ``env_id``'s family (``name="auto"``), the one called ``name``
    (a family, or ``agent/family``), or none (``name`` ``None`` or ``"none"``)."""
    if name is None or name == "none":
        return None
    available = {p.family: p for p in presets(agent)}
    if name == "auto":
        detected = task_family(env_id)
        return available.get(detected) if detected is not None else None
    family = name.split("/", 1)[1] if "/" in name else name  # (agent/family: a plug-in's own name for it)
    if family not in available:
        raise ValueError(
            f"{agent} has no preset {name!r}; its presets: {', '.join(sorted(available)) or 'none'}, "
            "or none (the plain defaults)"
        )
    return available[family]


def describe_presets() -> str:
    """One line per agent: its presets (for ``shoal train --help``)."""
    by_agent: dict[str, list[str]] = {}
    for p in presets():
        by_agent.setdefault(p.agent, []).append(p.family)
    return "; ".join(f"{agent}: {', '.join(families)}" for agent, families in sorted(by_agent.items()))
