"""The compiled loop's evaluation: ``episodes`` envs played to their first episode's end in one
jitted ``while_loop`` (``make_evaluation``), as a run evaluates and as ``shoal evaluate`` plays
a run of it again (``evaluate_compiled``).

``shoal evaluate`` of a compiled-loop run uses this evaluation, not the gymnasium wrapper
(``JaxGymVectorEnv``) the replay path steps: the wrapper draws its keys in another order, so for
one seed it plays other episodes. With this one a run's numbers come back exactly: evaluation
``k`` of a run with seed ``s`` (``eval.csv``'s row ``k``, ``eval_episodes`` episodes) is
``shoal evaluate RUN --episodes <eval_episodes> --seed <s + 1_000_003 + 7919 k>`` of the
checkpoint it evaluated.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from shoal.core.types import ActorInfo
from shoal.envs.jax_envs import make_jax_vector_env
from shoal.envs.jax_vector import JaxVectorEnv

EVAL_SEED_OFFSET = 1_000_003  # (as the evaluator's: evaluation k resets with seed + this + 7919 k)
EVAL_STEP_CAP = 100_000  # an evaluation episode longer than this is cut


def make_evaluation(policy: Any, venv: JaxVectorEnv, episodes: int) -> Any:
    """``(params, key) -> (returns [rows], lengths [rows])``: ``episodes`` copies of the env,
    each to its first episode's end, with ``policy`` (the agent's ``Policy``: greedy for a run's
    evaluation; a recurrent one from fresh states, carried from step to step), in one jitted
    ``while_loop``; an episode cut at ``EVAL_STEP_CAP`` steps counts its return and length so far.
    A row per copy, or per copy and agent for a JaxMARL env (``episodes * venv.num_agents``, copy
    by copy, agents in order), as the replay path's evaluation plays ``episodes`` copies."""
    rows = episodes * venv.num_agents

    def evaluate(params: Any, key: jax.Array) -> tuple[jax.Array, jax.Array]:
        reset_key, key = jax.random.split(key)
        obs, env = venv.reset(reset_key, rows)
        info = ActorInfo(jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32))
        memory = None if policy.initial_state is None else policy.initial_state(rows)

        def body(state: tuple) -> tuple:
            (obs, memory), env, key, returns, lengths, done, t = state
            key, policy_key, step_key = jax.random.split(key, 3)
            if memory is None:
                action, _, _ = policy.apply(params, policy_key, obs, info)
            else:  # (an env's later episodes do not count: its state need not start again)
                action, _, _, memory = policy.apply(params, policy_key, obs, info, memory)
            env, step = venv.step(step_key, env, action)
            ended = jnp.logical_and(jnp.logical_or(step.terminated, step.truncated), jnp.logical_not(done))
            returns = jnp.where(ended, step.episode_return, returns)
            lengths = jnp.where(ended, step.episode_length, lengths)
            return (step.observation, memory), env, key, returns, lengths, done | ended, t + 1

        def going(state: tuple) -> jax.Array:
            return jnp.logical_and(jnp.logical_not(jnp.all(state[5])), state[6] < EVAL_STEP_CAP)

        zeros = jnp.zeros(rows, jnp.float32)
        start = ((obs, memory), env, key, zeros, jnp.zeros(rows, jnp.int32), jnp.zeros(rows, bool), 0)
        _, env, _, returns, lengths, done, _ = jax.lax.while_loop(going, body, start)
        returns = jnp.where(done, returns, env.episode_return)
        return returns, jnp.where(done, lengths, env.episode_length)

    return jax.jit(evaluate)


def evaluate_compiled(
    trained: Any,
    episodes: int,
    seed: int,
    envs_at_once: int,
    on_round: Callable[[int, int], None] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """``(returns, lengths)`` of ``episodes`` episodes of ``trained`` (a ``TrainedPolicy`` of a
    compiled-loop run, greedy or not as loaded) on its run's JAX env (``config.env.args``) in
    rounds of ``min(episodes, envs_at_once)`` envs (one compilation): the round that starts at
    episode ``i`` plays from ``PRNGKey(seed + i)``, a last, shorter one keeps the episodes it needs.
    A JaxMARL env's episode is a copy's: its agents' returns summed (the team's), as ``shoal
    evaluate`` reports a PettingZoo run's. ``on_round(episodes done, env steps of the round)``
    after each round."""
    config = trained.config
    multiagent = config.multiagent
    venv = make_jax_vector_env(
        config.env.id, config.env.args, config.env.num_envs, multiagent.agent_ids, multiagent.global_state
    )
    at_once = min(episodes, envs_at_once)
    evaluation = make_evaluation(trained.policy, venv, at_once)
    returns, lengths = np.zeros(episodes), np.zeros(episodes, np.int64)
    for first in range(0, episodes, at_once):
        kept = min(at_once, episodes - first)
        row_returns, row_lengths = jax.device_get(evaluation(trained.params, jax.random.PRNGKey(seed + first)))
        per_copy = np.asarray(row_returns).reshape(at_once, venv.num_agents).sum(axis=1)
        copy_lengths = np.asarray(row_lengths).reshape(at_once, venv.num_agents).max(axis=1)
        returns[first : first + kept], lengths[first : first + kept] = per_copy[:kept], copy_lengths[:kept]
        if on_round is not None:
            on_round(first + kept, int(np.sum(np.asarray(row_lengths).reshape(at_once, -1)[:kept])))
    return returns, lengths
