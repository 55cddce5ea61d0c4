"""Running mean and variance of a stream of values, for observation and reward normalization.

The statistics of everything seen so far, merged batch by batch (Chan, Golub & LeVeque's
parallel formula, as SB3's ``RunningMeanStd``): with ``n``, ``mean``, ``var`` so far and a batch
of ``m`` values with mean ``mean_b`` and variance ``var_b``,

    delta = mean_b - mean
    n'    = n + m
    mean' = mean + delta * m / n'
    var'  = (var * n + var_b * m + delta**2 * n * m / n') / n'

Observations are normalized as ``clip((x - mean) / sqrt(var + eps), -clip, clip)``; rewards are
scaled by the running standard deviation of the discounted return ``R_t = gamma R_{t-1} + r_t``
(``R`` restarts at 0 after an episode ends), as SB3's ``VecNormalize`` and CleanRL's PPO for
MuJoCo do: ``clip(r / sqrt(var_R + eps), -clip, clip)``. ``count`` starts at a tiny positive
number (no division by zero; the first batch's statistics take over).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from shoal.core.interfaces import Adder
from shoal.core.types import Step

EPSILON = 1e-8


# ``{"count": n, "mean": [...], "var": [...]}``: a plain dict, so that it travels with the params
# (over RPC and shared memory, whose codec keeps dicts but not named tuples) and into checkpoints.
RunningStats = dict


def init_stats(shape: tuple[int, ...] = ()) -> RunningStats:
    return {
        "count": jnp.asarray(1e-4, jnp.float32),
        "mean": jnp.zeros(shape, jnp.float32),
        "var": jnp.ones(shape, jnp.float32),
    }


def merge(stats: RunningStats, batch_count: jax.Array, batch_mean: jax.Array, batch_var: jax.Array) -> RunningStats:
    """``stats`` after a batch of ``batch_count`` values with ``batch_mean`` / ``batch_var``."""
    n, mean, var = stats["count"], stats["mean"], stats["var"]
    delta = batch_mean - mean
    count = n + batch_count
    return {
        "count": count,
        "mean": mean + delta * batch_count / count,
        "var": (var * n + batch_var * batch_count + jnp.square(delta) * n * batch_count / count) / count,
    }


def update(stats: RunningStats, values: jax.Array, axis_name: str | None = None) -> RunningStats:
    """``stats`` after ``values`` (``[..., *mean.shape]``; the leading axes are the batch). With
    ``axis_name``, the batch is every device's share of it (equal shares)."""
    feature_dims = jnp.ndim(stats["mean"])
    axes = tuple(range(values.ndim - feature_dims))
    values = values.astype(jnp.float32)
    count = jnp.asarray(values.size // max(1, jnp.size(stats["mean"])), jnp.float32)
    mean, mean_square = jnp.mean(values, axis=axes), jnp.mean(jnp.square(values), axis=axes)
    if axis_name is not None:
        count = jax.lax.psum(count, axis_name)
        mean, mean_square = jax.lax.pmean(mean, axis_name), jax.lax.pmean(mean_square, axis_name)
    return merge(stats, count, mean, jnp.maximum(mean_square - jnp.square(mean), 0.0))


def normalize(stats: RunningStats, x: jax.Array, clip: float = 10.0) -> jax.Array:
    return jnp.clip((x - stats["mean"]) / jnp.sqrt(stats["var"] + EPSILON), -clip, clip)


def scale(stats: RunningStats, x: jax.Array, clip: float = 10.0) -> jax.Array:
    """``x`` divided by the running standard deviation (no centring: rewards keep their sign)."""
    return jnp.clip(x / jnp.sqrt(stats["var"] + EPSILON), -clip, clip)


class DiscountedReturns(Adder):
    """An adder that records each env's discounted return so far, ``R_t = gamma R_{t-1} + r_t``
    (restarting at 0 after an episode ends), as ``extras["discounted_return"]`` of every step it
    forwards to ``adder``: what the learner's reward scale is the running deviation of."""

    def __init__(self, adder: Adder, num_envs: int, discount: float) -> None:
        self._adder, self._discount = adder, discount
        self._returns = np.zeros(num_envs, np.float64)

    def add(self, step: Step) -> None:
        self._returns = self._discount * self._returns + np.asarray(step.reward, np.float64)
        self._adder.add(step._replace(extras={**step.extras, "discounted_return": self._returns.astype(np.float32)}))
        self._returns[np.asarray(step.terminated) | np.asarray(step.truncated)] = 0.0

    def flush(self) -> None:
        self._adder.flush()

    def send_pending(self) -> None:
        self._adder.send_pending()

    def close(self, timeout_s: float | None = None) -> bool:
        return self._adder.close(timeout_s)
