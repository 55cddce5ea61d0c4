"""Envs: making vector envs from every source Shoal reads, and what shapes their data.

* ``environments``: ``make_vector_env`` (gymnasium ids and factories, ale-py's Atari vector env,
  EnvPool, PettingZoo, the memory tasks), ``environment_spec``, ``check_env_id``, action clipping
  and final observations;
* ``env_sources`` (PettingZoo's too), ``envpool_env``, ``memory_tasks``: the sources;
* ``jax_envs`` (gymnax, Craftax; ``brax_envs``; ``jaxmarl_envs``: agents as rows) and ``jax_vector``
  (``JaxVectorEnv``: JAX envs stepped as one vector env under ``jit``): the JAX env sources;
* ``observations``: Dict observations and action masks; ``multiagent``: many agents as rows of
  one vector env; ``selfplay`` and ``snapshot_pool``: self-play opponents; ``video``: recording.

``shoal.actors`` keeps the acting loop, the actor and the variable client; it imports from here.
"""

from shoal.envs.environments import check_env_id, environment_spec, make_vector_env

__all__ = ["check_env_id", "environment_spec", "make_vector_env"]
