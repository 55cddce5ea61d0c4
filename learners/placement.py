"""Where the learner's arrays live: its devices as a one-axis mesh (``Placement``), ``shard_map``
on any JAX, and copies of the state that XLA owns (``owned``). With
``shoal.learners.replicated``, these are Shoal's device-specific lines.

Placement is ``jax.device_put`` with a ``NamedSharding``: the state replicated (``P()``), host
batches split along their leading axis (``P(AXIS_NAME)``: device ``d`` gets rows ``d*b ..
(d+1)*b - 1``), the same on every JAX from the pinned 0.4.34 to today's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from shoal.learners.updates import AXIS_NAME


def shard_map(f: Callable, mesh: Mesh, in_specs: Any, out_specs: Any) -> Callable:
    """``shard_map`` on any JAX. Replication is not checked (JAX 0.4.34 has no rule for
    ``lax.cond``, e.g. in optax's periodic target update): the agents' updates keep replicas
    equal by all-reducing their gradients, which the 2-device tests check."""
    if hasattr(jax, "shard_map"):  # JAX >= 0.6.1
        return jax.shard_map(f, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_vma=False)
    from jax.experimental.shard_map import shard_map as legacy_shard_map  # lazy: JAX 0.4.34's fallback

    return legacy_shard_map(f, mesh, in_specs, out_specs, check_rep=False)


class Placement:
    """The learner's devices as a one-axis mesh: what is replicated, and how batches split."""

    def __init__(self, devices: Sequence[jax.Device]) -> None:
        self.devices = list(devices)
        self.mesh = Mesh(np.asarray(self.devices), (AXIS_NAME,))
        self.replicated, self.split = NamedSharding(self.mesh, P()), NamedSharding(self.mesh, P(AXIS_NAME))

    def replicate(self, tree: Any) -> Any:
        return jax.device_put(tree, self.replicated)

    def check(self, tree: Any) -> Any:
        """``tree`` (host arrays ``[batch, ...]``), once checked to split evenly over the devices."""
        n = len(self.devices)
        for leaf in jax.tree_util.tree_leaves(tree):
            if np.shape(leaf)[0] % n:
                raise ValueError(f"batch of {np.shape(leaf)[0]} rows cannot be split over {n} devices")
        return tree

    def shard(self, tree: Any) -> Any:
        """Host arrays ``[batch, ...]`` split along ``batch`` over the devices: device ``d``
        holds rows ``d*b .. (d+1)*b - 1`` (``b = batch / num_devices``)."""
        return jax.device_put(self.check(tree), self.split)


def owned(tree: Any) -> Any:
    """Copies owned by XLA: a device_put of a host array may alias its memory on a CPU, and the
    update donates the state's buffers (a donated alias of numpy memory corrupted the heap)."""
    return jax.tree_util.tree_map(lambda x: jnp.array(x, copy=True), tree)
