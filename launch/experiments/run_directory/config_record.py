"""The layout of a run's ``config.json``, by schema version, and the mapping between versions.

Version 2 (``"schema_version": 2``, what ``ExperimentConfig.to_dict`` writes) holds the
config's groups as objects (``"env": {"id": ..., "num_envs": ...}``, ``"run": {...}``; see
``config_groups``) beside ``preset``, ``agent``, ``agent_config``, ``resolved_target_return``,
``jax_devices`` and ``launch``. Version 1 (no ``schema_version``: every run written before the
groups) held every field at the top level under its flat name (``env_id``, ``num_envs``, ...).
``grouped_record`` reads either as version 2, ``flat_record`` either as version 1 (what
``shoal compare --by`` and ``shoal status`` read); a version this Shoal does not know is one
``ValueError`` line. Nothing here imports an agent or an env.
"""

from __future__ import annotations

import json
from typing import Any

from shoal.launch.experiments.config_groups import FLAT_FIELDS, FLAT_NAMES, GROUPS

SCHEMA_VERSION = 2
KNOWN_VERSIONS = (1, 2)
NOT_RECORDED = ("resume", "network_factory", "callbacks")  # (flat names of fields config.json never holds)


def record_version(path: str, saved: Any) -> int:
    """The schema version of ``saved`` (``config.json`` at ``path``): 1 without one; a one-line
    ``ValueError`` for anything but a known version."""
    if not isinstance(saved, dict) or "schema_version" not in saved:
        return 1
    version = saved["schema_version"]
    known = " or ".join(map(str, KNOWN_VERSIONS))
    if isinstance(version, int) and not isinstance(version, bool) and version > SCHEMA_VERSION:
        raise ValueError(
            f"{path}: schema_version {version} is newer than this Shoal reads ({known}): "
            "the run was written by a later Shoal; upgrade Shoal to use it"
        )
    if isinstance(version, bool) or not isinstance(version, int) or version not in KNOWN_VERSIONS:
        raise ValueError(f"{path}: schema_version must be {known}, got {json.dumps(version)[:60]}")
    return version


def grouped_record(saved: dict[str, Any], path: str = "config.json") -> dict[str, Any]:
    """``saved`` (a ``config.json`` of any known version) in version 2's layout: a version 1
    record's flat fields moved into their groups (a group it lacks left out: its defaults);
    keys neither layout names are kept as they are."""
    if record_version(path, saved) == 2:
        return saved
    grouped: dict[str, Any] = {"schema_version": SCHEMA_VERSION}
    for key, value in saved.items():
        group, field = FLAT_FIELDS.get(key, (None, key))
        if group is None:
            grouped[field] = value
        else:
            grouped.setdefault(group, {})[field] = value
    return grouped


def flat_record(saved: dict[str, Any], path: str = "config.json") -> dict[str, Any]:
    """``saved`` (a ``config.json`` of any known version) in version 1's flat layout (a group
    that is not an object is left out: ``check_config`` names it)."""
    if record_version(path, saved) == 1:
        return saved
    flat: dict[str, Any] = {}
    for key, value in saved.items():
        if key == "schema_version":
            continue
        if key in GROUPS:
            for field, item in value.items() if isinstance(value, dict) else ():
                flat[FLAT_NAMES.get((key, field), f"{key}.{field}")] = item
        else:
            flat[key] = value
    return flat
