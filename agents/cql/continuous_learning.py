"""Continuous CQL's loss (Kumar et al. 2020, CQL(H) with importance sampling, as CORL and d3rlpy
implement it), on SAC's loss seam (``shoal.agents.sac.learning.Loss``).

For a batch of n-step transitions ``(s, a, R, d, s')`` from a fixed dataset (``a`` the
dataset's action) and ``N = num_sampled_actions``, per state ``s`` draw, held fixed
(``stop_gradient``: the term trains the critics only)::

    a_u^k ~ Uniform(Box)      log mu(a_u^k)      = -sum_dims log(high - low)
    a_s^k ~ pi(.|s)           log pi(a_s^k | s)                       k = 1..N
    a_n^k ~ pi(.|s')          log pi(a_n^k | s')  (asked of Q(s, .), as CORL)

and, for each critic ``Q_j`` (``j = 1, 2``)::

    C_j(s) = logsumexp over the 3N actions b of ( Q_j(s, b) - log density(b) )  -  Q_j(s, a)
    loss   = SAC's loss (sac_loss: critics, policy, temperature)  +  alpha * mean_s sum_j C_j(s)

The logsumexp is a soft maximum of ``Q_j(s, .)`` over the Box (the densities are the importance
weights of a Monte-Carlo estimate of ``log integral exp Q_j(s, b) db``): the term pushes the
critics down on every action (most on the largest) and up on the data's, so an action the
dataset never took cannot look better than those it did -- what SAC on a fixed dataset gets
wrong (its policy climbs the critics' errors on unseen actions). ``alpha`` is fixed (no
Lagrange tuning). Everything else -- the twin critics' TD to ``R + d (min_j Q_j_target(s', a')
- alpha_T log pi(a'|s'))``, the policy, the temperature ``alpha_T``, the three Adams, the
Polyak target, the scan -- is SAC's (``shoal.agents.sac.learning.make_update``, which takes
this as its ``loss``); the greedy policy is SAC's squashed mean.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import optax

from shoal.agents.components.flax_apply import apply_network
from shoal.agents.sac.learning import sac_loss, sample
from shoal.agents.sac.networks import SACNetworks
from shoal.core.types import Pytree
from shoal.learners.updates import global_row_keys


def conservative_term(q_sampled: jax.Array, log_density: jax.Array, q_data: jax.Array) -> jax.Array:
    """``logsumexp_b (Q(s, b) - log density(b)) - Q(s, a_data)`` per state: ``q_sampled`` and
    ``log_density`` ``[batch, samples]``, ``q_data`` ``[batch]``; returns ``[batch]``."""
    return jax.nn.logsumexp(q_sampled - log_density, axis=-1) - q_data


def _repeat(observation: Pytree, times: int) -> Pytree:
    """Each row ``times`` times, sample-major: ``[times * batch, ...]`` (row ``k * batch + i`` is
    row ``i``), so that ``reshape(times, batch)`` gives back ``[sample, batch]``."""
    return jax.tree_util.tree_map(lambda x: jnp.concatenate([x] * times, axis=0), observation)


def _rows(observation: Pytree) -> int:
    return jax.tree_util.tree_leaves(observation)[0].shape[0]


def sampled_actions(
    networks: SACNetworks, policy: optax.Params, batch: dict, key: jax.Array, samples: int
) -> tuple[jax.Array, jax.Array]:
    """The ``3N`` actions of each state of the module docstring, ``[3N * batch, d]`` sample-major,
    and their log densities ``[batch, 3N]``, held fixed."""
    rows = _rows(batch["observation"])
    uniform_key, current_key, next_key = jax.random.split(key, 3)
    low = jnp.asarray(networks.action_offset - networks.action_scale)
    width = jnp.asarray(2.0 * networks.action_scale)
    unit = jax.vmap(lambda k: jax.random.uniform(k, (networks.action_size,)))(
        global_row_keys(uniform_key, samples * rows)
    )
    uniform = low + width * unit
    uniform_log_density = jnp.full((samples * rows,), -jnp.sum(jnp.log(width)))
    current, current_log_prob = sample(networks, policy, _repeat(batch["observation"], samples), current_key)
    following, following_log_prob = sample(networks, policy, _repeat(batch["next_observation"], samples), next_key)
    actions = jnp.concatenate([uniform, current, following], axis=0)
    log_density = jnp.concatenate([uniform_log_density, current_log_prob, following_log_prob], axis=0)
    log_density = log_density.reshape(3 * samples, rows).T  # [batch, 3N]
    return jax.lax.stop_gradient(actions), jax.lax.stop_gradient(log_density)


def cql_sac_loss(
    networks: SACNetworks,
    params: dict,
    target_critic_params: optax.Params,
    batch: dict,
    rng: jax.Array,
    config: Any,
) -> tuple[jax.Array, dict]:
    """SAC's loss plus ``alpha`` times the conservative term of each critic (module docstring);
    ``config`` a ``CQLConfig`` (SAC's fields, ``alpha``, ``num_sampled_actions``). SAC's
    ``Loss`` (``shoal.agents.sac.learning``)."""
    loss, metrics = sac_loss(networks, params, target_critic_params, batch, rng, config)
    samples = config.num_sampled_actions
    rows = _rows(batch["observation"])
    actions, log_density = sampled_actions(
        networks, jax.lax.stop_gradient(params["policy"]), batch, jax.random.fold_in(rng, 3), samples
    )
    critic = params["critic"]
    q1_sampled, q2_sampled = apply_network(
        networks.critic, critic, _repeat(batch["observation"], 3 * samples), actions
    )  # each [3N * batch]
    q1_data, q2_data = apply_network(networks.critic, critic, batch["observation"], batch["action"])
    conservative1 = conservative_term(q1_sampled.reshape(3 * samples, rows).T, log_density, q1_data)
    conservative2 = conservative_term(q2_sampled.reshape(3 * samples, rows).T, log_density, q2_data)
    conservative = jnp.mean(conservative1 + conservative2)
    return loss + config.alpha * conservative, {**metrics, "conservative": conservative}


__all__ = ["conservative_term", "cql_sac_loss", "sampled_actions"]
