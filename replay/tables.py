"""Reverb tables for batched n-step transitions.

One replay *item* holds one vector step: ``num_envs`` transitions, each field shaped
``[num_envs, ...]``. Writing one item per vector step (instead of one per env) is what keeps the
actor fast; the dataset flattens items back into transitions (``shoal.replay.dataset``).
"""

from __future__ import annotations

import reverb
import tensorflow as tf

from shoal.core.specs import EnvironmentSpec


def transition_signature(spec: EnvironmentSpec, num_envs: int) -> dict[str, tf.TensorSpec]:
    """The table signature of one item: a ``Transition`` with a leading ``[num_envs]`` dim."""
    obs = tf.TensorSpec((num_envs, *spec.observation_shape), tf.as_dtype(spec.observation_dtype))
    return {
        "observation": obs,
        "action": tf.TensorSpec((num_envs, *spec.action_shape), tf.as_dtype(spec.action_dtype)),
        "reward": tf.TensorSpec((num_envs,), tf.float32),
        "discount": tf.TensorSpec((num_envs,), tf.float32),
        "next_observation": obs,
    }


def make_transition_table(name: str, spec: EnvironmentSpec, num_envs: int, *, max_size: int,
                          min_size: int, samples_per_insert: float, error_buffer: float,
                          prioritized: bool = False, priority_exponent: float = 0.6) -> reverb.Table:
    """A replay table of batched transitions (sizes in items, i.e. vector steps).

    Sampling is uniform, or prioritized with ``P(i) ∝ priority_i ** priority_exponent``; the
    oldest item is removed first (FIFO). A ``SampleToInsertRatio`` rate limiter keeps
    ``samples / inserts`` within ``error_buffer`` of ``samples_per_insert`` once ``min_size``
    items are in the table: the learner cannot run ahead of the actors, nor fall behind.
    """
    sampler = (reverb.selectors.Prioritized(priority_exponent) if prioritized
               else reverb.selectors.Uniform())
    return reverb.Table(
        name=name,
        sampler=sampler,
        remover=reverb.selectors.Fifo(),
        max_size=max_size,
        rate_limiter=reverb.rate_limiters.SampleToInsertRatio(
            samples_per_insert=samples_per_insert, min_size_to_sample=min_size,
            error_buffer=error_buffer),
        signature=transition_signature(spec, num_envs),
    )


def rate_limited_sample_budget(inserted: int, *, min_size: int, samples_per_insert: float) -> float:
    """How many items a learner keeping exactly ``samples_per_insert`` may have sampled.

    Zero until ``min_size`` items were inserted, then ``(inserted - min_size) * spi``. A
    single-process runner that keeps its sampling at or under this budget (plus one update's
    worth, which the table's ``error_buffer`` must cover) never blocks on the rate limiter.
    """
    return max(0.0, (inserted - min_size) * samples_per_insert)
