"""The ``SHOAL_*`` environment variables: one table, parsed and checked in one place.

``value(name)`` is how the code reads one (parsed; the default when unset or empty; a bad
value raises ``ValueError`` naming the variable, its value and what is accepted).
``check_environment()`` checks them all, once, before a run starts anything (``shoal train``,
``run_experiment``, ``run_distributed_experiment`` call it through ``ExperimentConfig.validate``).

The launcher sets ``SHOAL_TOKEN``, ``SHOAL_BIND_HOST``, ``SHOAL_ADVERTISE_HOST``, ``SHOAL_PORTS``,
``SHOAL_NODE_START`` and ``SHOAL_PARAMS_VIA`` for the nodes it starts; a user may set
``SHOAL_TOKEN`` (the RPC secret of every launch) and the others below.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable, Mapping
from typing import Any


@dataclasses.dataclass(frozen=True)
class Variable:
    """One variable: its default, a parser (``ValueError`` for a bad text) and what it accepts."""

    name: str
    default: Any
    parse: Callable[[str], Any]
    accepted: str


def _number(low: float, high: float) -> Callable[[str], float]:
    def parse(text: str) -> float:
        value = float(text)
        if not (math.isfinite(value) and low <= value <= high):
            raise ValueError(text)
        return value

    return parse


def _choice(*choices: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in choices:
            raise ValueError(text)
        return text

    return parse


def _cache_directory(text: str) -> str:
    if text.lower() != "off" and os.path.exists(text) and not os.path.isdir(text):
        raise ValueError(text)
    return text


def _token(text: str) -> str:
    if len(text) > 4096 or not all("!" <= c <= "~" for c in text):  # (a gRPC metadata value)
        raise ValueError(text)
    return text


def parse_ports(text: str | None) -> tuple[int, int] | None:
    """``FIRST-LAST`` (or one port) -> ``(first, last)``; ``None``/empty -> ``None`` (any port)."""
    if not text:
        return None
    first, _, last = text.partition("-")
    try:
        low, high = int(first), int(last or first)
    except ValueError:
        low = high = -1
    if not 1024 <= low <= high <= 65535:
        raise ValueError(f"ports are FIRST-LAST with 1024 <= FIRST <= LAST <= 65535, got {text!r}")
    return low, high


def _count(text: str) -> int:
    value = int(text)
    if not 1 <= value <= 10**9:
        raise ValueError(text)
    return value


def _host(text: str) -> str:
    if len(text) > 255 or not all("!" <= c <= "~" for c in text):
        raise ValueError(text)
    return text


MAX_GRPC_MB = 2047  # gRPC's message limit is a signed 32-bit byte count
VARIABLES: dict[str, Variable] = {
    v.name: v
    for v in (
        Variable(
            "SHOAL_RPC_MAX_MESSAGE_MB",
            256.0,
            _number(1, MAX_GRPC_MB),
            f"a number of MiB in [1, {MAX_GRPC_MB}], the largest RPC request or reply (default 256)",
        ),
        Variable(
            "SHOAL_PEER_TIMEOUT_S",
            60.0,
            _number(1, 86400),
            "a number of seconds in [1, 86400] a Ray node may go unheard (default 60)",
        ),
        Variable(
            "SHOAL_STEP_TIMEOUT_S",
            60.0,
            _number(1, 86400),
            "a number of seconds in [1, 86400] an env's step() or render() may take (default 60)",
        ),
        Variable(
            "SHOAL_EVAL_MAX_EPISODE_STEPS",
            100_000,
            _count,
            "an integer in [1, 1000000000], the steps an evaluation episode may last (default 100000)",
        ),
        Variable(
            "SHOAL_COMPILATION_CACHE",
            None,
            _cache_directory,
            "a directory (not a file) for JAX's compilation cache, or off",
        ),
        Variable("SHOAL_PARAMS_VIA", "auto", _choice("auto", "rpc"), "auto or rpc"),
        Variable(
            "SHOAL_REPLAY_VIA",
            "auto",
            _choice("auto", "rpc"),
            "auto or rpc (native replay's bulk arrays through shared memory on one host, or always RPC)",
        ),
        Variable(
            "SHOAL_PACK_BATCHES",
            "auto",
            _choice("auto", "1", "0"),
            "auto, 1 or 0 (the learner packs each host batch into one array: auto on accelerators, 1 always, 0 never)",
        ),
        Variable("SHOAL_TOKEN", None, _token, "printable ASCII without spaces, at most 4096 characters"),
        Variable("SHOAL_PORTS", None, parse_ports, "FIRST-LAST with 1024 <= FIRST <= LAST <= 65535"),
        Variable("SHOAL_NODE_START", 1, _count, "an integer in [1, 1000000000] (set by the launcher)"),
        Variable("SHOAL_BIND_HOST", "127.0.0.1", _host, "a host name or IP address (set by the launcher)"),
        Variable("SHOAL_ADVERTISE_HOST", "127.0.0.1", _host, "a host name or IP address (set by the launcher)"),
    )
}


def value(name: str, environ: Mapping[str, str] | None = None) -> Any:
    """The parsed value of ``name`` (its default when unset or empty); ``ValueError``, in one
    line naming the variable, its value and what is accepted, when it is bad."""
    variable = VARIABLES[name]
    text = (os.environ if environ is None else environ).get(name, "")
    if not text:
        return variable.default
    try:
        return variable.parse(text)
    except (ValueError, OverflowError):
        raise ValueError(
            f"environment variable {name}={text[:100]!r} is not valid: expected {variable.accepted}"
        ) from None


def check_environment(environ: Mapping[str, str] | None = None) -> None:
    """Raises ``ValueError`` for the first bad ``SHOAL_*`` variable of the table (see ``value``)."""
    for name in VARIABLES:
        value(name, environ)
