"""IMPALA's update and policies, written top to bottom (Espeholt et al., 2018).

Actors act with params that may lag the learner's; each step records the behaviour policy's
logits, so the learner corrects for the lag with V-trace. On a batch of env sequences
``[rows, T]`` (each step with its own next observation, see ``shoal.replay.adders``):

1. ``rho_t = pi(a_t|s_t) / mu(a_t|s_t)`` with the current policy ``pi`` and the behaviour ``mu``;
2. values ``v_t = V(s_t)`` and ``v'_t = V(s'_t)``; the V-trace targets and policy-gradient
   advantages come from ``shoal.agents.impala.vtrace`` (the recursion is written out there), with

       r'_t = r_t + gamma * truncated_t * v'_t        discount_t = gamma * (1 - done_t)

   i.e. a truncated episode bootstraps from its final observation through the reward, and no
   trace crosses an episode end (``discount_t = 0``); a terminated one does not bootstrap;
3. one SGD step on

       L = -mean(log pi(a_t|s_t) * A_t^pg) + baseline_coef * mean((vs_t - v_t)^2) / 2
           - entropy_coef * mean(entropy(pi(.|s_t)))

   with gradients averaged over devices (``pmean``), clipped, and applied with Adam.

With action masks (an ``action_mask`` stored with each observation), the policy is the
categorical over the allowed actions (``shoal.agents.components.dict_observations.mask_logits``): the actor
samples among them and records the masked logits, and ``pi``, ``mu`` and the entropy above are
those of the renormalised allowed set.

The loss is a seam (as DQN's): ``make_update(network, config, loss)`` minimizes any ``Loss`` -- a
plain function of the params, a batch, a key and the config, returning the loss and its metrics
-- and keeps the state, the optimizer and the all-reduce; an IMPALA variant is a config subclass
and a builder whose ``loss`` is another one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from shoal.agents.components import distributions
from shoal.agents.components.dict_observations import action_mask, example_observation, mask_logits
from shoal.agents.components.flax_apply import apply_network
from shoal.agents.impala.config import IMPALAConfig
from shoal.agents.impala.networks import IMPALANetworks
from shoal.agents.impala.vtrace import vtrace
from shoal.core.specs import ArraySpec
from shoal.core.types import ActorInfo, Batch, Policy, Pytree
from shoal.learners.updates import AXIS_NAME, UpdateFn, UpdateOutput


class TrainingState(NamedTuple):
    params: optax.Params
    opt_state: optax.OptState


def make_optimizer(config: IMPALAConfig) -> optax.GradientTransformation:
    return optax.chain(optax.clip_by_global_norm(config.max_gradient_norm), optax.adam(config.learning_rate))


def init_state(key: jax.Array, networks: IMPALANetworks, config: IMPALAConfig) -> TrainingState:
    @jax.jit  # one compiled computation, not dozens of eagerly dispatched ones
    def init(key: jax.Array) -> TrainingState:
        params = networks.network.init(key, example_observation(networks.observation_shape))
        return TrainingState(params, make_optimizer(config).init(params))

    return init(key)


def vtrace_targets(
    value: jax.Array,
    next_value: jax.Array,
    reward: jax.Array,
    terminated: jax.Array,
    truncated: jax.Array,
    rho: jax.Array,
    config: IMPALAConfig,
) -> tuple[jax.Array, jax.Array]:
    """V-trace errors ``vs_t - v_t`` and pg advantages, ``[rows, T]`` (module docstring, step 2)."""
    done = jnp.maximum(terminated, truncated)
    reward = reward + config.discount * truncated * next_value
    discount = config.discount * (1.0 - done)
    out = vtrace(
        value,
        next_value,
        reward,
        discount,
        rho,
        config.vtrace_lambda,
        config.clip_rho_threshold,
        config.clip_pg_rho_threshold,
    )
    return out.errors, out.pg_advantage


def impala_loss(
    network: nn.Module, params: optax.Params, batch: dict, rng: jax.Array, config: IMPALAConfig
) -> tuple[jax.Array, dict]:
    """IMPALA's loss on one device's sequences (module docstring): the policy gradient with
    V-trace's advantages, the baseline loss and the entropy bonus. ``rng`` is not used."""
    rows, length = batch["reward"].shape
    flat = lambda x: x.reshape(rows * length, *x.shape[2:])  # noqa: E731
    logits, values = apply_network(
        network,
        params,
        jax.tree_util.tree_map(
            lambda s, s_next: jnp.concatenate([flat(s), flat(s_next)]), batch["observation"], batch["next_observation"]
        ),
    )
    logits = mask_logits(logits[: rows * length].reshape(rows, length, -1), action_mask(batch["observation"]))
    value, next_value = jnp.split(values.reshape(2, rows, length), 2)
    value, next_value = value[0], jax.lax.stop_gradient(next_value[0])
    log_prob = distributions.categorical_log_prob(logits, batch["action"])  # 1.
    behaviour_log_prob = distributions.categorical_log_prob(batch["extras"]["logits"], batch["action"])
    rho = jax.lax.stop_gradient(jnp.exp(log_prob - behaviour_log_prob))
    errors, pg_advantage = vtrace_targets(  # 2.
        value,
        next_value,
        batch["reward"],
        batch["terminated"].astype(jnp.float32),
        batch["truncated"].astype(jnp.float32),
        rho,
        config,
    )
    policy_loss = -jnp.mean(log_prob * jax.lax.stop_gradient(pg_advantage))  # 3.
    baseline_loss = 0.5 * jnp.mean(jnp.square(errors))
    entropy = jnp.mean(distributions.categorical_entropy(logits))
    loss = policy_loss + config.baseline_coef * baseline_loss - config.entropy_coef * entropy
    return loss, {
        "loss": loss,
        "policy_loss": policy_loss,
        "baseline_loss": baseline_loss,
        "entropy": entropy,
        "mean_rho": jnp.mean(rho),
    }


# The loss seam (as DQN's, ``shoal.agents.dqn.learning.Loss``): an IMPALA variant is a config
# subclass and a function of this shape; ``make_update`` keeps the state, the optimizer and the
# all-reduce over devices. ``loss(network, params, batch, rng, config) -> (loss, metrics)``:
# ``batch`` one device's env sequences ``[rows, T, ...]`` (``observation``, ``action``, ``reward``,
# ``terminated``, ``truncated``, ``next_observation``, ``extras["logits"]``: the behaviour
# policy's); ``rng`` a key of this SGD step (the same on every device); ``metrics`` scalars.
Loss = Callable[[nn.Module, optax.Params, dict, jax.Array, IMPALAConfig], tuple[jax.Array, dict]]


def make_update(
    network: nn.Module, config: IMPALAConfig, loss: Loss = impala_loss, key: jax.Array | None = None
) -> UpdateFn:
    """One SGD step on ``loss`` per batch; ``key`` seeds the loss's ``rng`` (folded with the
    step count: a resumed run draws the same keys)."""
    optimizer = make_optimizer(config)
    key = jax.random.PRNGKey(0) if key is None else key

    def update(state: TrainingState, batch: Batch) -> tuple[TrainingState, UpdateOutput]:
        rng = jax.random.fold_in(key, state.opt_state[1][0].count)  # (Adam's step count)
        grads, metrics = jax.grad(lambda params: loss(network, params, batch, rng, config), has_aux=True)(state.params)
        grads = jax.lax.pmean(grads, AXIS_NAME)  # all-reduce: every device applies the same update
        updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
        state = TrainingState(optax.apply_updates(state.params, updates), opt_state)
        return state, UpdateOutput(jax.lax.pmean(metrics, AXIS_NAME), 1)

    return update


def extras_spec(num_actions: int) -> dict[str, ArraySpec]:
    return {"logits": ArraySpec((num_actions,), np.float32), "policy_version": ArraySpec((), np.int32)}


def make_policy(network: nn.Module, num_actions: int, evaluation: bool, eval_sample: bool = False) -> Policy:
    """Sampling from the categorical policy (recording its logits and the params version), or
    for evaluation its most likely action, or a sample (``eval_sample``)."""

    def policy(
        params: optax.Params,
        key: jax.Array,
        observation: Pytree,
        info: ActorInfo,
    ) -> tuple[jax.Array, dict[str, jax.Array], jax.Array]:
        logits = apply_network(network, params, observation, method="logits")
        logits = mask_logits(logits, action_mask(observation))
        if evaluation and not eval_sample:
            return jnp.argmax(logits, axis=-1).astype(jnp.int32), {}, key
        key, sample_key = jax.random.split(key)
        action = jax.random.categorical(sample_key, logits).astype(jnp.int32)
        if evaluation:
            return action, {}, key
        version = jnp.full(action.shape, info.params_version, jnp.int32)
        return action, {"logits": logits, "policy_version": version}, key

    return Policy(policy, {} if evaluation else extras_spec(num_actions))
