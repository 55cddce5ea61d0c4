"""The values of ``shoal``'s flags that take more than a plain number or name: each parser
turns the text into the value (``argparse``'s ``type=``), or raises
``argparse.ArgumentTypeError`` naming the flag, the bad text and what it takes."""

from __future__ import annotations

import argparse
from typing import Any

from shoal.core import environment_variables
from shoal.launch.experiments.trackers import BACKENDS
from shoal.launch.programs import Resources


def parse_override(text: str) -> tuple[str, str]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"--set takes KEY=VALUE, got {text!r}")
    key, value = text.split("=", 1)
    return key.strip(), value.strip()


def parse_env_arg(text: str) -> tuple[str, Any]:
    """``KEY=VALUE`` -> ``(key, value)``, the value a Python literal where it reads as one."""
    from shoal.envs.env_sources import parse_env_value  # lazy: the CLI's import stays light

    key, sep, value = text.partition("=")
    if not sep or not key.strip().isidentifier():
        raise argparse.ArgumentTypeError(f"--env-arg takes KEY=VALUE with KEY an argument name, got {text!r}")
    return key.strip(), parse_env_value(value.strip())


def parse_agent_group(text: str) -> tuple[str, str]:
    """``PATTERN=GROUP`` -> ``(pattern, group)``."""
    pattern, sep, group = text.partition("=")
    if not sep or not pattern.strip() or not group.strip():
        raise argparse.ArgumentTypeError(f"--agent-group takes PATTERN=GROUP (e.g. 'adversary_*=red'), got {text!r}")
    return pattern.strip(), group.strip()


def parse_num_actors(text: str) -> int | str:
    """``N``, ``auto`` or ``auto:MIN-MAX`` (the bounds are checked with the other settings)."""
    if text.strip().startswith("auto"):
        return text.strip()
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--num-actors takes an integer, auto or auto:MIN-MAX (e.g. auto:1-8), got {text!r}"
        ) from None


def parse_track(text: str) -> str | None:
    """A tracking backend's name, or ``none`` -> ``None``."""
    if text == "none":
        return None
    if text not in BACKENDS:
        raise argparse.ArgumentTypeError(f"--track takes {', '.join(BACKENDS)} or none, got {text!r}")
    return text


def parse_resources(text: str) -> tuple[str, Any]:
    """``GROUP:NAME=VALUE[,NAME=VALUE...]`` -> ``(group, Resources)``."""
    group, _, spec = text.partition(":")
    try:
        if not group:
            raise ValueError("no group")
        return group, Resources.parse(spec)
    except ValueError as e:
        raise argparse.ArgumentTypeError(
            f"--resources takes GROUP:NAME=VALUE[,NAME=VALUE...] with finite amounts >= 0, got {text!r} ({e})"
        ) from None


def parse_ports(text: str) -> tuple[int, int] | None:
    """``FIRST-LAST`` -> ``(first, last)``."""
    try:
        return environment_variables.parse_ports(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"--ports: {e}") from None
