"""A replay buffer held on the device, for the compiled loop (``shoal.launch.experiments.anakin``):
pure JAX functions over a ``Buffer`` state, so that it lives in a ``lax.scan``'s carry.

The buffer is a ring of ``capacity`` time rows for each of ``num_envs`` envs: every leaf of
``data`` is preallocated ``[num_envs, capacity, ...]`` (env-major, so that ``shard_map`` splits the
envs over the devices as it splits the envs' states). ``add`` writes one vector step (``[num_envs,
...]``) at ``position`` and overwrites the oldest row once the ring is full. ``sample`` draws
windows of ``length`` consecutive steps of one env, uniformly over the env and over every
window start whose ``length`` steps are all written (``length=1``: uniform transition replay;
``length=n``: what an n-step return reads, see ``anakin.dqn``). The draw is uniform with
``jax.random.randint`` (a prioritized draw would replace ``_starts``: the rest stays).
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


def init(example: Any, num_envs: int, capacity: int) -> Buffer:
    """An empty ring for steps shaped as ``example`` (one env's step: arrays or ``ShapeDtypeStruct``)."""
    if capacity < 1 or num_envs < 1:
        raise ValueError(f"a device buffer needs capacity >= 1 and num_envs >= 1, got {capacity} and {num_envs}")
    data = jax.tree_util.tree_map(lambda x: jnp.zeros((num_envs, capacity, *x.shape), x.dtype), example)
    zero = jnp.zeros((), jnp.int32)
    return Buffer(data, zero, zero)


def capacity(buffer: Buffer) -> int:
    """The ring's rows per env (static)."""
    return int(jax.tree_util.tree_leaves(buffer.data)[0].shape[1])


def add(buffer: Buffer, step: Any) -> Buffer:
    """``buffer`` with one vector step (leaves ``[num_envs, ...]``) written at its position."""
    data = jax.tree_util.tree_map(lambda d, x: d.at[:, buffer.position].set(x.astype(d.dtype)), buffer.data, step)
    rows = capacity(buffer)
    return Buffer(data, (buffer.position + 1) % rows, jnp.minimum(buffer.size + 1, rows))


def num_windows(buffer: Buffer, length: int = 1) -> jax.Array:
    """Window starts per env whose ``length`` steps are all written (``size - length + 1``, at least 0)."""
    return jnp.maximum(buffer.size - length + 1, 0)


def _starts(buffer: Buffer, key: jax.Array, count: int, length: int) -> tuple[jax.Array, jax.Array]:
    """``(envs [count], rows [count])``: uniform window starts (the oldest row is index 0)."""
    num_envs = jax.tree_util.tree_leaves(buffer.data)[0].shape[0]
    env_key, row_key = jax.random.split(key)
    envs = jax.random.randint(env_key, (count,), 0, num_envs)
    valid = jnp.maximum(num_windows(buffer, length), 1)  # (an empty ring draws row 0: callers wait for a size)
    oldest = (buffer.position - buffer.size) % capacity(buffer)
    rows = (oldest + jax.random.randint(row_key, (count,), 0, valid)) % capacity(buffer)
    return envs, rows


def sample(buffer: Buffer, key: jax.Array, count: int, length: int = 1) -> tuple[Any, tuple[jax.Array, jax.Array]]:
    """``count`` windows (leaves ``[count, length, ...]``) drawn uniformly, and where they start
    (``(env, row)``, each ``[count]``)."""
    envs, rows = _starts(buffer, key, count, length)
    window = (rows[:, None] + jnp.arange(length)[None, :]) % capacity(buffer)  # [count, length]
    taken = jax.tree_util.tree_map(lambda d: d[envs[:, None], window], buffer.data)
    return taken, (envs, rows)
