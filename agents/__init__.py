"""Agents: one builder per algorithm, and a registry of them by name."""

from shoal.agents.builders import AgentBuilder, get_builder, registered_agents

__all__ = ["AgentBuilder", "get_builder", "registered_agents"]
