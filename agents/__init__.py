"""Agents: one builder per algorithm, and a registry of them by name."""

from shoal.agents.builders import AgentBuilder
from shoal.agents.registry import config_class, get_builder, registered_agents

__all__ = ["AgentBuilder", "config_class", "get_builder", "registered_agents"]
