"""PPO's update and policies, written top to bottom.

A learner update takes env sequences ``[rows, T, ...]`` (``rows = rollouts x envs``; each step
carries its own next observation, see ``shoal.replay.adders``) and, on each device's rows:

1. values with the current params, ``v_t = V(s_t)`` and ``v'_t = V(s'_t)``;
2. generalized advantage estimation (Schulman et al., 2016), backwards over t::

       delta_t = r_t + gamma * (1 - terminated_t) * v'_t - v_t
       A_t     = delta_t + gamma * lambda * (1 - done_t) * A_{t+1}     (done = terminated or truncated)
       R_t     = A_t + v_t

   so a termination does not bootstrap, a truncation bootstraps from its final observation, and
   no trace crosses an episode end (sequences are not cut at episode ends);
3. ``num_epochs`` passes of ``num_minibatches`` SGD steps (``shoal.learners.minibatch_epochs``),
   each minimizing, with ``rho = pi(a|s) / mu(a|s)`` (``mu``: the behaviour policy, whose
   log-probability the actor recorded) and advantages standardized over the minibatch::

       L = -mean(min(rho * A, clip(rho, 1 - eps, 1 + eps) * A))
           + value_coef * mean((V(s) - R)^2) / 2 - entropy_coef * mean(entropy(pi(.|s)))

   Gradients are averaged over devices (``pmean``), clipped by global norm, applied with Adam.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from shoal.agents.ppo.config import PPOConfig
from shoal.agents.networks import ActorCritic
from shoal.agents.ppo.networks import PPONetworks
from shoal.core.specs import ArraySpec
from shoal.core.types import ActorInfo, Policy
from shoal.learners.updates import AXIS_NAME, UpdateFn, UpdateOutput, minibatch_epochs


class TrainingState(NamedTuple):
    params: optax.Params
    opt_state: optax.OptState
    key: jax.Array


def make_optimizer(config: PPOConfig) -> optax.GradientTransformation:
    return optax.chain(optax.clip_by_global_norm(config.max_gradient_norm),
                       optax.adam(config.learning_rate, eps=1e-5))


def init_state(key: jax.Array, networks: PPONetworks, config: PPOConfig) -> TrainingState:
    @jax.jit  # one compiled computation, not dozens of eagerly dispatched ones
    def init(key):
        params_key, key = jax.random.split(key)
        params = networks.network.init(params_key, jnp.zeros((1, *networks.observation_shape), jnp.float32))
        return TrainingState(params, make_optimizer(config).init(params), key)

    return init(key)


def gae(reward, terminated, truncated, value, next_value, discount: float, lambda_: float):
    """Advantages ``[rows, T]`` by the recursion in the module docstring."""
    delta = reward + discount * (1.0 - terminated) * next_value - value
    carry_on = discount * lambda_ * (1.0 - jnp.maximum(terminated, truncated))

    def backwards(next_advantage, step):
        delta_t, carry_on_t = step
        advantage = delta_t + carry_on_t * next_advantage
        return advantage, advantage

    _, advantages = jax.lax.scan(backwards, jnp.zeros(reward.shape[0]), (delta.T, carry_on.T),
                                 reverse=True)
    return advantages.T


def _global_standardize(x):
    """``x`` standardized with its mean and variance over every device's minibatch."""
    mean = jax.lax.pmean(jnp.mean(x), AXIS_NAME)
    variance = jax.lax.pmean(jnp.mean(jnp.square(x - mean)), AXIS_NAME)
    return (x - mean) / (jnp.sqrt(variance) + 1e-8)


def make_update(network: ActorCritic, config: PPOConfig) -> UpdateFn:
    optimizer = make_optimizer(config)

    def loss_fn(params, minibatch):
        logits, value = network.apply(params, minibatch["observation"])
        log_probs = jax.nn.log_softmax(logits)
        log_prob = jnp.take_along_axis(log_probs, minibatch["action"][:, None], axis=-1)[:, 0]
        log_rho = log_prob - minibatch["log_prob"]
        rho = jnp.exp(log_rho)
        advantage = minibatch["advantage"]
        if config.normalize_advantages:
            advantage = _global_standardize(advantage)
        clipped_rho = jnp.clip(rho, 1.0 - config.clip_epsilon, 1.0 + config.clip_epsilon)
        policy_loss = -jnp.mean(jnp.minimum(rho * advantage, clipped_rho * advantage))
        value_loss = 0.5 * jnp.mean(jnp.square(value - minibatch["return"]))
        entropy = -jnp.mean(jnp.sum(jnp.exp(log_probs) * log_probs, axis=-1))
        loss = policy_loss + config.value_coef * value_loss - config.entropy_coef * entropy
        return loss, {"loss": loss, "policy_loss": policy_loss, "value_loss": value_loss,
                      "entropy": entropy, "approx_kl": jnp.mean((rho - 1.0) - log_rho),
                      "clip_fraction": jnp.mean(jnp.abs(rho - 1.0) > config.clip_epsilon)}

    def sgd_step(state: TrainingState, minibatch):
        grads, metrics = jax.grad(loss_fn, has_aux=True)(state.params, minibatch)
        grads = jax.lax.pmean(grads, AXIS_NAME)  # all-reduce: every device applies the same update
        updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
        state = state._replace(params=optax.apply_updates(state.params, updates), opt_state=opt_state)
        return state, jax.lax.pmean(metrics, AXIS_NAME), None

    def update(state: TrainingState, batch) -> tuple[TrainingState, UpdateOutput]:
        rows, length = batch["reward"].shape
        flat = lambda x: x.reshape(rows * length, *x.shape[2:])  # noqa: E731
        _, values = network.apply(state.params, jnp.concatenate(
            [flat(batch["observation"]), flat(batch["next_observation"])]))
        value, next_value = jnp.split(values.reshape(2, rows, length), 2)
        value, next_value = value[0], next_value[0]
        advantage = gae(batch["reward"], batch["terminated"].astype(jnp.float32),
                        batch["truncated"].astype(jnp.float32), value, next_value,
                        config.discount, config.gae_lambda)
        data = {"observation": batch["observation"], "action": batch["action"],
                "log_prob": batch["extras"]["log_prob"], "advantage": advantage,
                "return": advantage + value}
        key, epochs_key = jax.random.split(state.key)
        return minibatch_epochs(sgd_step, state._replace(key=key), data, epochs_key,
                                num_epochs=config.num_epochs, num_minibatches=config.num_minibatches)

    return update


EXTRAS_SPEC = {"log_prob": ArraySpec((), np.float32), "policy_version": ArraySpec((), np.int32)}


def make_policy(network: ActorCritic, evaluation: bool) -> Policy:
    """Sampling from the categorical policy (recording its log-probability and the params
    version), or its most likely action for evaluation."""

    def policy(params, key, observation, info: ActorInfo):
        logits = network.apply(params, observation, method=ActorCritic.logits)
        if evaluation:
            return jnp.argmax(logits, axis=-1).astype(jnp.int32), {}, key
        key, sample_key = jax.random.split(key)
        action = jax.random.categorical(sample_key, logits)
        log_prob = jnp.take_along_axis(jax.nn.log_softmax(logits), action[:, None], axis=-1)[:, 0]
        version = jnp.full(action.shape, info.params_version, jnp.int32)
        return action.astype(jnp.int32), {"log_prob": log_prob, "policy_version": version}, key

    return Policy(policy, {} if evaluation else EXTRAS_SPEC)
