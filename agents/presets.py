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
    gymnax-minatar -- gymnax's MinAtar games (gymnax:<Game>-MinAtar: JAX envs, the compiled loop)
    brax    -- Brax's envs (brax:<name>: continuous control in JAX, the compiled loop)
    craftax -- Craftax (craftax:<Id>, the compiled loop)
    jaxmarl-mpe -- JaxMARL's multi-agent particle envs (jaxmarl:MPE_<name>: agents as rows)

``shoal train`` applies the preset of the env's family by default (``--preset NAME`` picks one,
``--preset none`` keeps the agent's plain defaults, ``--preset FILE.json`` reads one from a file:
``load_preset_file``, e.g. ``shoal tune``'s best trial); ``--set`` overrides any field after it.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from typing import Any

import gymnasium as gym

from shoal.agents.registry import builder_class, builtin_agents
from shoal.envs.environments import is_atari, resolve_env_id
from shoal.envs.jax_envs import is_jax_env

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
    if is_atari(env_id):
        return "atari"
    if is_jax_env(env_id):  # (a JAX env: by its source and name, none registers entry points)
        source, name = env_id.split(":", 1)
        if source == "gymnax":
            return "gymnax-minatar" if name.endswith("-MinAtar") else None
        if source == "jaxmarl":
            return "jaxmarl-mpe" if name.startswith("MPE_") else None
        return source  # (brax, craftax)
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
    if name.endswith(".json") or os.path.isfile(name):  # (a file; "dqn/atari" names a preset)
        return load_preset_file(agent, name)
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


def load_preset_file(agent: str, path: str) -> Preset:
    """A preset written to a JSON file (``shoal tune``'s ``best_preset.json``, or a user's)::

        {"agent": "dqn", "source": "...", "settings": {"learning_rate": 0.002},
         "experiment": {"max_env_steps": 50000, "eval_every": 2000}}

    ``settings`` are ``agent``'s config fields, ``experiment`` flat experiment settings (both
    checked where a preset's are); ``source`` says where it comes from. One line for a file of
    another agent, or one that is not a preset."""
    try:
        with open(path) as f:
            record = json.load(f)
    except FileNotFoundError:
        raise ValueError(f"--preset {path}: no such file (a preset name, none, auto, or a preset .json file)") from None
    except (OSError, ValueError) as e:
        raise ValueError(f"--preset {path}: cannot read it as JSON: {getattr(e, 'strerror', None) or e}") from None
    if not isinstance(record, dict) or not isinstance(record.get("settings", {}), dict):
        raise ValueError(f"--preset {path}: expected a JSON object with settings (and agent, experiment, source)")
    unknown = sorted(set(record) - {"agent", "env", "source", "base_preset", "settings", "experiment"})
    if unknown:
        raise ValueError(
            f"--preset {path}: unknown key(s) {', '.join(unknown)} (accepted: agent, env, source, base_preset, "
            "settings, experiment)"
        )
    if record.get("agent", agent) != agent:
        raise ValueError(f"--preset {path}: a preset of {record['agent']}, not of --agent {agent}")
    if not isinstance(record.get("experiment", {}), dict):
        raise ValueError(f"--preset {path}: experiment must be an object of experiment settings")
    settings = {k: tuple(v) if isinstance(v, list) else v for k, v in record.get("settings", {}).items()}
    return Preset(
        agent=agent,
        family=f"file:{os.path.basename(path)}",
        source=str(record.get("source", path)),
        settings=settings,
        experiment=dict(record.get("experiment", {})),
    )


def describe_presets() -> str:
    """One line per agent: its presets (for ``shoal train --help``)."""
    by_agent: dict[str, list[str]] = {}
    for p in presets():
        by_agent.setdefault(p.agent, []).append(p.family)
    return "; ".join(f"{agent}: {', '.join(families)}" for agent, families in sorted(by_agent.items()))
