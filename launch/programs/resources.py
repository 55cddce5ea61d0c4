"""``Resources``: what each node of a group asks of the machine it is placed on."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any


@dataclasses.dataclass(frozen=True)
class Resources:
    """What each node of a group asks of the machine it is placed on (Ray launcher; the local
    launchers run everything on this machine and ignore it). ``None``: the engine's default.

    num_cpus / num_gpus: CPUs / GPUs reserved (fractions allowed).
    memory: bytes of memory reserved.
    custom: custom resources, e.g. ``{"actor_host": 1}`` places nodes only on machines started
      with ``ray start --resources '{"actor_host": N}'``.
    """

    num_cpus: float | None = None
    num_gpus: float | None = None
    memory: int | None = None
    custom: Mapping[str, float] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        amounts = {"num_cpus": self.num_cpus, "num_gpus": self.num_gpus, "memory": self.memory, **dict(self.custom)}
        for name, value in amounts.items():
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ValueError(f"resource {name} must be a finite number >= 0, got {value!r}")

    @classmethod
    def parse(cls, text: str) -> Resources:
        """``NAME=VALUE[,NAME=VALUE...]`` (``num_cpus``, ``num_gpus``, ``memory`` in bytes, or a
        custom resource) -> ``Resources``; raises ``ValueError`` naming what is wrong."""
        try:
            pairs = dict((k.strip(), float(v)) for k, v in (item.split("=", 1) for item in text.split(",") if item))
        except ValueError:
            pairs = {}
        if not pairs or any(not name for name in pairs):
            raise ValueError(f"resources are NAME=VALUE[,NAME=VALUE...], got {text!r}")
        standard: dict[str, Any] = {
            name: pairs.pop(name) for name in ("num_cpus", "num_gpus", "memory") if name in pairs
        }
        if "memory" in standard and math.isfinite(standard["memory"]):
            standard["memory"] = int(standard["memory"])
        return cls(**standard, custom=pairs)

    def text(self) -> str:
        """The ``NAME=VALUE,...`` form ``parse`` reads."""
        values = {k: getattr(self, k) for k in ("num_cpus", "num_gpus", "memory") if getattr(self, k) is not None}
        return ",".join(f"{k}={v}" for k, v in {**values, **dict(self.custom)}.items())
