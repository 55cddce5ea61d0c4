"""``LaunchSettings``: how a distributed run is launched, one typed object from the CLI to
``config.json`` and back.

``shoal train --launcher ...`` parses its flags into one (``--resources`` into ``Resources``,
``--ports`` into a ``(first, last)`` pair), ``run_distributed_experiment`` takes its fields,
and ``config.json`` holds its ``record()`` as ``"launch"`` (``null`` for a one-process run),
which ``from_record`` reads back -- also the records of earlier versions, whose fields it
defaults. The checks of these settings (``check``) live here too, beside the cap on actors.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Mapping
from typing import Any

from shoal.core.environment_variables import parse_ports
from shoal.launch.experiments.distributed.autoscale import parse_auto
from shoal.launch.programs.launching import LAUNCHERS
from shoal.launch.programs.resources import Resources

PARAMS_VIA = ("auto", "rpc")
MAX_ACTORS_PER_CORE, MIN_ACTOR_CAP = 4, 64


def max_actors() -> int:
    """The most actor processes one machine may run (more wants a cluster: the Ray launcher)."""
    return max(MIN_ACTOR_CAP, MAX_ACTORS_PER_CORE * (os.cpu_count() or 1))


def actor_bounds(num_actors: Any, launcher: str) -> tuple[int, int] | None:
    """``(MIN, MAX)`` of an autoscaled ``num_actors`` (``"auto"``: from 1 to this machine's
    cores, at least 2, or ``max_actors()`` under Ray; ``"auto:MIN-MAX"``); ``None`` for a count."""
    cores = os.cpu_count() or 1
    return parse_auto(num_actors, max_actors(), max_actors() if launcher == "ray" else max(2, cores))


def check_num_actors(num_actors: Any, launcher: str, what: str = "num_actors") -> None:
    """Refuses a count of actors outside ``[1, max_actors()]`` or a bad ``auto`` spec; warns of
    more than the cores."""
    cap, cores = max_actors(), os.cpu_count() or 1
    try:
        if actor_bounds(num_actors, launcher) is not None:
            return
    except ValueError as e:
        raise ValueError(f"{what}: {e}") from None
    if isinstance(num_actors, bool) or not isinstance(num_actors, int) or not 1 <= num_actors <= cap:
        raise ValueError(
            f"{what} must be an integer in [1, {cap}] on this machine ({cores} cores), "
            f"got {num_actors!r}; for more, use a cluster (the Ray launcher)"
        )
    if num_actors > cores and launcher != "ray":
        print(
            f"shoal: warning: {num_actors} actor processes on {cores} CPU cores: they will share the "
            "cores (fine for slow envs, slower per actor for fast ones)",
            file=sys.stderr,
        )


@dataclasses.dataclass(frozen=True)
class LaunchSettings:
    """A distributed run's launch: ``launcher`` (``processes``, ``inprocess`` or ``ray``), its
    ``num_actors``, the Ray cluster to join (``ray_address``; ``None``: a local Ray), what each
    group's nodes ask of Ray (``resources``), the ports its servers listen on (``ports``:
    ``(first, last)``, ``None``: any free one) and how readers get the learner's parameters
    (``params_via``: ``auto`` or ``rpc``)."""

    launcher: str = "processes"
    num_actors: int | str = 4  # or "auto", "auto:MIN-MAX" (autoscale)
    ray_address: str | None = None
    resources: Mapping[str, Resources] = dataclasses.field(default_factory=dict)
    ports: tuple[int, int] | None = None
    params_via: str = "auto"

    def check(self, actors_flag: str = "num_actors") -> None:
        """Raises ``ValueError`` for the first bad field (``actors_flag``: how an error names
        ``num_actors``, e.g. ``--num-actors``)."""
        if self.launcher not in LAUNCHERS:
            raise ValueError(f"unknown launcher {self.launcher!r}; choose one of {', '.join(LAUNCHERS)}")
        check_num_actors(self.num_actors, self.launcher, actors_flag)
        if self.params_via not in PARAMS_VIA:
            raise ValueError(f"params_via must be one of {', '.join(PARAMS_VIA)}, got {self.params_via!r}")
        for group, wanted in self.resources.items():
            if not isinstance(wanted, Resources):
                raise ValueError(f"resources[{group!r}] must be a Resources, got {wanted!r}")

    def actor_bounds(self) -> tuple[int, int] | None:
        """``(MIN, MAX)`` when the actors are autoscaled (``num_actors`` ``"auto..."``), else ``None``."""
        return actor_bounds(self.num_actors, self.launcher)

    def record(self) -> dict[str, Any]:
        """The ``"launch"`` record of ``config.json`` (JSON: resources and ports as text)."""
        return {
            "launcher": self.launcher,
            "num_actors": self.num_actors,
            "ray_address": self.ray_address,
            "resources": [f"{group}:{r.text()}" for group, r in self.resources.items()],
            "ports": f"{self.ports[0]}-{self.ports[1]}" if self.ports else None,
            "params_via": self.params_via,
        }

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> LaunchSettings:
        """What ``record()`` wrote (a missing field takes its default, as earlier versions' files do)."""
        resources = {}
        for text in record.get("resources") or []:
            group, _, spec = str(text).partition(":")
            resources[group] = Resources.parse(spec)
        return cls(
            launcher=record.get("launcher") or "processes",
            num_actors=record.get("num_actors", 4),
            ray_address=record.get("ray_address"),
            resources=resources,
            ports=parse_ports(record.get("ports")),
            params_via=record.get("params_via") or "auto",
        )

    def replace(self, **changes: Any) -> LaunchSettings:
        return dataclasses.replace(self, **changes)
