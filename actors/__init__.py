"""Actors: gymnasium adapters, the batched actor, the variable client, and the loops."""

from shoal.actors.actor import BatchedActor
from shoal.actors.environments import check_env_id, environment_spec, make_vector_env
from shoal.actors.loops import EnvironmentLoop, evaluate
from shoal.actors.variable_client import VariableClient

__all__ = ["BatchedActor", "EnvironmentLoop", "VariableClient", "check_env_id", "environment_spec",
           "evaluate", "make_vector_env"]
