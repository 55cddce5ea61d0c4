"""The action distributions of the actor-critic agents, per example (summed over action dims).

Categorical over ``logits`` ``[..., A]``:

    log pi(a) = log_softmax(logits)[a]          H = -sum_a pi(a) log pi(a)

Diagonal Gaussian with mean ``mu`` ``[..., D]`` and log standard deviation ``log_std`` (``[D]``,
state-independent, or ``[..., D]``):

    log pi(a) = sum_d -0.5 ((a_d - mu_d) / sigma_d)^2 - log sigma_d - 0.5 log(2 pi)
    H         = sum_d log sigma_d + 0.5 (1 + log(2 pi))

A Gaussian policy's actions are sampled unbounded; the env clips them to its bounds (the
log-probability is of the unclipped sample, which is what the learner re-evaluates).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def categorical_log_prob(logits: jax.Array, action: jax.Array) -> jax.Array:
    return jnp.take_along_axis(jax.nn.log_softmax(logits), action[..., None].astype(jnp.int32), axis=-1)[..., 0]


def categorical_entropy(logits: jax.Array) -> jax.Array:
    log_probs = jax.nn.log_softmax(logits)
    return -jnp.sum(jnp.exp(log_probs) * log_probs, axis=-1)


def gaussian_log_prob(mean: jax.Array, log_std: jax.Array, action: jax.Array) -> jax.Array:
    z = (action - mean) / jnp.exp(log_std)
    return jnp.sum(-0.5 * jnp.square(z) - log_std - HALF_LOG_2PI, axis=-1)


def gaussian_entropy(mean: jax.Array, log_std: jax.Array) -> jax.Array:
    return jnp.sum(jnp.broadcast_to(log_std, mean.shape) + 0.5 + HALF_LOG_2PI, axis=-1)


def gaussian_sample(key: jax.Array, mean: jax.Array, log_std: jax.Array) -> jax.Array:
    return mean + jnp.exp(log_std) * jax.random.normal(key, mean.shape)
