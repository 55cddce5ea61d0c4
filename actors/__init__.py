"""Actors: the batched actor, the variable client, and the environment and evaluation loops
(making envs is ``shoal.envs``)."""

from shoal.actors.actor import BatchedActor
from shoal.actors.loops import EnvironmentLoop, evaluate
from shoal.actors.variable_client import VariableClient

__all__ = ["BatchedActor", "EnvironmentLoop", "VariableClient", "evaluate"]
