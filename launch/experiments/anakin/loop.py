"""``Loop``: what the compiled loop's runner (``anakin.runner``) needs of an agent: its first
carry, its iteration, how the carry splits over the devices, and its counts per iteration."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple


class Loop(NamedTuple):
    """An agent's part of the compiled loop (PPO's: ``anakin.runner``; DQN's and SAC's:
    ``anakin.off_policy``).

    ``initial``: the first carry (host or device arrays; a NamedTuple with the fields ``train``,
    ``key``, ``updates``, ``episodes``, ``return_sum`` and ``length_sum``, the runner reads them).
    ``iteration``: ``carry -> (carry, metrics)`` on one device's share, under ``shard_map``.
    ``specs``: the carry's ``PartitionSpec`` per field (a prefix of the carry's tree).
    ``steps_per_iteration``: env steps of one iteration (over all devices);
    ``sgd_steps_per_update``: SGD steps of one update (``carry.updates`` counts updates).
    """

    initial: Any
    iteration: Callable[[Any], tuple[Any, dict]]
    specs: Any
    steps_per_iteration: int
    sgd_steps_per_update: int
