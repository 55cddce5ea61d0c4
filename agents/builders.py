"""The ``AgentBuilder`` protocol (after Acme) and the registry of agents by name.

A builder turns an agent's config into the pieces the runners wire together; the same builder
serves the single-process runner and the distributed program.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Protocol

import jax

from shoal.core.counting import Counter
from shoal.core.interfaces import Actor, Adder, Learner, VariableSource
from shoal.core.loggers import Logger
from shoal.core.specs import EnvironmentSpec


class AgentBuilder(Protocol):
    def validate(self, spec: EnvironmentSpec, num_devices: int) -> None:
        """Raises ``ValueError`` (naming the bad value) if the agent cannot run on ``spec``."""

    def updates_allowed(self, items_inserted: int) -> int:
        """Learner updates a single-process run may have done once ``items_inserted`` replay
        items were written: the pace the replay table's rate limiter enforces."""

    def make_networks(self, spec: EnvironmentSpec) -> Any:
        """The default network factory."""

    def make_replay_tables(self, spec: EnvironmentSpec, policy: Any) -> list:
        """The ``reverb.Table``s this agent writes to and samples from."""

    def make_dataset_iterator(self, replay_client: Any) -> Iterator:
        """Iterates learner batches out of replay."""

    def make_adder(self, replay_client: Any, spec: EnvironmentSpec, policy: Any) -> Adder:
        """What turns actor steps into replay items."""

    def make_actor(self, key: jax.Array, policy: Any, spec: EnvironmentSpec,
                   variable_source: VariableSource, adder: Adder | None,
                   asynchronous_updates: bool = True) -> Actor:
        """An actor acting with ``policy`` on params pulled from ``variable_source``."""

    def make_learner(self, key: jax.Array, networks: Any, dataset: Iterator, logger: Logger,
                     counter: Counter, replay_client: Any) -> Learner:
        """The learner."""

    def make_policy(self, networks: Any, spec: EnvironmentSpec, evaluation: bool) -> Any:
        """The (jittable) policy used for acting, or for evaluation if ``evaluation``."""


def _dqn(overrides: dict) -> AgentBuilder:
    from shoal.agents.dqn import DQNBuilder, DQNConfig

    return DQNBuilder(DQNConfig(**overrides))


_REGISTRY: dict[str, Callable[[dict], AgentBuilder]] = {"dqn": _dqn}


def registered_agents() -> list[str]:
    return sorted(_REGISTRY)


def get_builder(name: str, **config_overrides: Any) -> AgentBuilder:
    """The builder of agent ``name`` with its default config, updated by ``config_overrides``."""
    if name not in _REGISTRY:
        raise ValueError(f"unknown agent {name!r}; available: {', '.join(registered_agents())}")
    return _REGISTRY[name](config_overrides)
