"""A replay buffer held on the device, for the compiled loop (``shoal.launch.experiments.anakin``):
pure JAX functions over a ``Buffer`` state, so that it lives in a ``lax.scan``'s carry.

The buffer is a ring of ``capacity`` time rows for each of ``num_envs`` envs: every leaf of
``data`` is preallocated ``[num_envs, capacity, ...]`` (env-major, so that ``shard_map`` splits the
envs over the devices as it splits the envs' states). ``add`` writes one vector step (``[num_envs,
...]``) at ``position`` and overwrites the oldest row once the ring is full. ``sample`` draws
windows of ``length`` consecutive steps of one env, uniformly over the env and over every
window start whose ``length`` steps are all written (``length=1``: uniform transition replay;
``length=n``: what an n-step return reads, see ``anakin.off_policy``). The draw is uniform with
``jax.random.randint``, or, for a ring made ``prioritized``, proportional to ``priority **
exponent`` over the written starts (prioritized replay, Schaul et al., 2016): a cumulative sum
of the weights and a ``searchsorted`` of uniform draws in it (measured against
``jax.random.categorical`` on the log-weights, which draws a Gumbel per item and draw: docs/anakin.md).
A new row's priority is the ring's highest so far (1 in an empty ring); ``set_priorities`` writes
the drawn rows' new ones (DQN's ``|TD|``).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp


class Buffer(NamedTuple):
    """The ring: ``data`` (leaves ``[num_envs, capacity, ...]``), the next row written, the rows written (``<= capacity``)."""

    data: Any
    position: jax.Array  # int32 scalar
    size: jax.Array  # int32 scalar
    priorities: jax.Array | None = None  # [num_envs, capacity] float32 (a prioritized ring's)


class Drawn(NamedTuple):
    """Where ``sample``'s windows start, and how likely each draw was (``table_size x probability``: 1 when uniform)."""

    envs: jax.Array  # [count]
    rows: jax.Array  # [count]
    probability: jax.Array  # [count]
    table_size: jax.Array  # scalar: the windows there were to draw from


def init(example: Any, num_envs: int, capacity: int, prioritized: bool = False) -> Buffer:
    """An empty ring for steps shaped as ``example`` (one env's step: arrays or ``ShapeDtypeStruct``),
    with a priority per row if ``prioritized``."""
    if capacity < 1 or num_envs < 1:
        raise ValueError(f"a device buffer needs capacity >= 1 and num_envs >= 1, got {capacity} and {num_envs}")
    data = jax.tree_util.tree_map(lambda x: jnp.zeros((num_envs, capacity, *x.shape), x.dtype), example)
    zero = jnp.zeros((), jnp.int32)
    return Buffer(data, zero, zero, jnp.zeros((num_envs, capacity), jnp.float32) if prioritized else None)


def capacity(buffer: Buffer) -> int:
    """The ring's rows per env (static)."""
    return int(jax.tree_util.tree_leaves(buffer.data)[0].shape[1])


def add(buffer: Buffer, step: Any) -> Buffer:
    """``buffer`` with one vector step (leaves ``[num_envs, ...]``) written at its position."""
    data = jax.tree_util.tree_map(lambda d, x: d.at[:, buffer.position].set(x.astype(d.dtype)), buffer.data, step)
    rows, priorities = capacity(buffer), buffer.priorities
    if priorities is not None:
        highest = jnp.where(buffer.size > 0, jnp.max(priorities), 1.0)
        priorities = priorities.at[:, buffer.position].set(highest)
    return Buffer(data, (buffer.position + 1) % rows, jnp.minimum(buffer.size + 1, rows), priorities)


def num_windows(buffer: Buffer, length: int = 1) -> jax.Array:
    """Window starts per env whose ``length`` steps are all written (``size - length + 1``, at least 0)."""
    return jnp.maximum(buffer.size - length + 1, 0)


def _starts(buffer: Buffer, key: jax.Array, count: int, length: int) -> Drawn:
    """Uniform window starts (the oldest row is index 0)."""
    num_envs = jax.tree_util.tree_leaves(buffer.data)[0].shape[0]
    env_key, row_key = jax.random.split(key)
    envs = jax.random.randint(env_key, (count,), 0, num_envs)
    valid = jnp.maximum(num_windows(buffer, length), 1)  # (an empty ring draws row 0: callers wait for a size)
    oldest = (buffer.position - buffer.size) % capacity(buffer)
    rows = (oldest + jax.random.randint(row_key, (count,), 0, valid)) % capacity(buffer)
    table_size = num_envs * valid
    return Drawn(envs, rows, jnp.full((count,), 1.0 / table_size, jnp.float32), table_size)


def _prioritized_starts(buffer: Buffer, key: jax.Array, count: int, length: int, exponent: float) -> Drawn:
    """Window starts drawn with probability ``priority ** exponent / sum`` over the written starts."""
    assert buffer.priorities is not None  # (sample's rule)
    num_envs, rows = buffer.priorities.shape
    age = (jnp.arange(rows) - (buffer.position - buffer.size)) % rows  # 0: the oldest row
    valid = age < num_windows(buffer, length)
    weights = jnp.where(valid[None, :], buffer.priorities**exponent, 0.0).reshape(-1)  # [num_envs * rows]
    cumulative = jnp.cumsum(weights)
    total = cumulative[-1]
    drawn = jnp.searchsorted(cumulative, jax.random.uniform(key, (count,)) * total, side="right")
    drawn = jnp.minimum(drawn, num_envs * rows - 1)
    table_size = num_envs * jnp.maximum(num_windows(buffer, length), 1)
    return Drawn(drawn // rows, drawn % rows, weights[drawn] / total, table_size)


def sample(
    buffer: Buffer, key: jax.Array, count: int, length: int = 1, priority_exponent: float | None = None
) -> tuple[Any, Drawn]:
    """``count`` windows (leaves ``[count, length, ...]``) and where they start (``Drawn``):
    uniformly, or in proportion to ``priority ** priority_exponent`` (a prioritized ring)."""
    if priority_exponent is None:
        drawn = _starts(buffer, key, count, length)
    elif buffer.priorities is None:
        raise ValueError("a prioritized draw needs a ring made with prioritized=True")
    else:
        drawn = _prioritized_starts(buffer, key, count, length, priority_exponent)
    window = (drawn.rows[:, None] + jnp.arange(length)[None, :]) % capacity(buffer)  # [count, length]
    taken = jax.tree_util.tree_map(lambda d: d[drawn.envs[:, None], window], buffer.data)
    return taken, drawn


def set_priorities(buffer: Buffer, drawn: Drawn, priorities: jax.Array) -> Buffer:
    """``buffer`` with the priorities of the windows ``drawn`` started at set to ``priorities`` ``[count]``."""
    assert buffer.priorities is not None
    return buffer._replace(priorities=buffer.priorities.at[drawn.envs, drawn.rows].set(priorities))
