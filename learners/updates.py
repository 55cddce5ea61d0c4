"""The update-function contract of ``ReplicatedLearner``, and two ways to build one.

An update function runs on ONE device's shard of a batch (the learner maps it over devices)::

    update(state, batch) -> (state, UpdateOutput(metrics, sgd_steps, aux))

* ``metrics``: a dict of *scalars*, already averaged over devices (``lax.pmean(x, AXIS_NAME)``);
* ``sgd_steps``: how many SGD steps the update did (an int or an int array);
* ``aux``: optional per-example outputs for the learner's host-side ``after_update`` hook
  (e.g. ``|TD|`` for priority updates), each with the shard's batch axis leading: the learner
  hands them to the hook concatenated over devices, in the host batch's order.

Gradients must be all-reduced inside the update, ``grads = lax.pmean(grads, AXIS_NAME)`` (the
Horovod / TF-Replicator scheme: every device applies the same update, so replicas stay equal).
Nothing here is specific to how the function is replicated (``shard_map`` in
``shoal.learners.replicated``; collectives by axis name work the same under ``pmap``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from shoal.core.types import Batch, Pytree, TrainState

AXIS_NAME = "devices"


class UpdateOutput(NamedTuple):
    metrics: Mapping[str, jax.Array]
    sgd_steps: int | jax.Array
    aux: Pytree = None


UpdateFn = Callable[[TrainState, Batch], tuple[TrainState, UpdateOutput]]
# sgd_step(state, batch) -> (state, metrics, aux): one SGD step on one device's minibatch.
SGDStep = Callable[[TrainState, Batch], tuple[TrainState, Mapping[str, jax.Array], Pytree]]


def global_row_keys(key: jax.Array, rows: int) -> jax.Array:
    """One key per row of this device's shard, ``fold_in(key, global row index)``: the same key
    for the same row of the global batch however many devices the rows are spread over."""
    global_rows = jax.lax.axis_index(AXIS_NAME) * rows + jnp.arange(rows)
    return jax.vmap(jax.random.fold_in, (None, 0))(key, global_rows)


def _mean_over_steps(metrics: Mapping[str, jax.Array]) -> dict[str, jax.Array]:
    return {name: jnp.mean(value, axis=0) for name, value in metrics.items()}


def _loop(
    body: Callable[[Any, Any], tuple[Any, Any]], carry: Any, xs: Pytree, length: int, unroll: bool
) -> tuple[Any, Any]:
    """``lax.scan(body, carry, xs)``, or the same steps unrolled into the computation. (XLA on
    a CPU runs convolutions inside a loop whose carry holds their weights some 20-50x slower
    than the same steps unrolled: the agents unroll the SGD steps of convolutional networks.)"""
    if not unroll:
        return jax.lax.scan(body, carry, xs, length=length)
    outputs = []
    for i in range(length):
        carry, out = body(carry, jax.tree_util.tree_map(lambda x, i=i: x[i], xs))
        outputs.append(out)
    return carry, jax.tree_util.tree_map(lambda *o: jnp.stack(o), *outputs)


def scan_sgd_steps(sgd_step: SGDStep, unroll: bool = False) -> UpdateFn:
    """``k`` SGD steps in one ``lax.scan`` (or unrolled), over a batch laid out ``[batch, k, ...]``.

    Step ``s`` trains on column ``s`` (``batch[:, s]``); metrics are averaged over the ``k``
    steps and ``aux`` is laid out like the batch, ``[batch, k, ...]``. This is DQN's and SAC's
    update shape.
    """

    def update(state: TrainState, batch: Batch) -> tuple[TrainState, UpdateOutput]:
        steps = jax.tree_util.tree_map(lambda x: jnp.swapaxes(x, 0, 1), batch)  # [k, batch, ...]
        num_steps = jax.tree_util.tree_leaves(steps)[0].shape[0]
        state, (metrics, aux) = _loop(
            lambda s, b: (lambda out: (out[0], out[1:]))(sgd_step(s, b)), state, steps, num_steps, unroll
        )
        aux = jax.tree_util.tree_map(lambda x: jnp.swapaxes(x, 0, 1), aux)  # [batch, k, ...]
        return state, UpdateOutput(_mean_over_steps(metrics), num_steps, aux)

    return update


def minibatch_epochs(
    sgd_step: SGDStep,
    state: TrainState,
    data: Batch,
    key: jax.Array,
    *,
    num_epochs: int,
    num_minibatches: int,
    unroll: bool = False,
) -> tuple[TrainState, UpdateOutput]:
    """``num_epochs`` passes of ``num_minibatches`` SGD steps over ``data`` ``[rows, T, ...]``.

    Each pass splits every row's ``T`` steps at random into ``num_minibatches`` disjoint parts;
    minibatch ``i`` holds part ``i`` of every row, flattened to ``[rows * T / num_minibatches,
    ...]``. A row's permutation is drawn from ``fold_in(epoch_key, global_row_index)``, so the
    global minibatches are the same whatever the number of devices the rows are spread over
    (a 2-device update equals a 1-device one on the same global batch). PPO's update shape.
    ``unroll``: the SGD steps unrolled into the computation instead of looped (see ``_loop``).
    """
    rows, length = jax.tree_util.tree_leaves(data)[0].shape[:2]
    if length % num_minibatches:
        raise ValueError(f"sequence length {length} is not divisible into {num_minibatches} minibatches")
    part = length // num_minibatches
    take = jax.vmap(lambda row, i: row[i])  # row [T, ...], i [T/M] -> [T/M, ...]

    def epoch(state: TrainState, epoch_key: jax.Array) -> tuple[TrainState, Mapping[str, jax.Array]]:
        def minibatch(state: TrainState, i: jax.Array) -> tuple[TrainState, Mapping[str, jax.Array]]:
            # The permutations are drawn here, in the loop that uses them (the same ones for every
            # minibatch of the epoch): JAX 0.4.34 miscompiles a permutation computed outside a
            # loop and read inside it under shard_map (every device got device 0's).
            order = jax.vmap(lambda k: jax.random.permutation(k, length))(global_row_keys(epoch_key, rows))
            index = jax.lax.dynamic_slice_in_dim(order, i * part, part, axis=1)  # [rows, T/M]
            batch = jax.tree_util.tree_map(lambda x: take(x, index).reshape(rows * part, *x.shape[2:]), data)
            state, metrics, _ = sgd_step(state, batch)
            return state, metrics

        return _loop(minibatch, state, jnp.arange(num_minibatches), num_minibatches, unroll)

    state, metrics = _loop(epoch, state, jax.random.split(key, num_epochs), num_epochs, unroll)
    metrics = jax.tree_util.tree_map(lambda m: jnp.mean(m, axis=(0, 1)), metrics)
    return state, UpdateOutput(metrics, num_epochs * num_minibatches)


def sequence_minibatch_epochs(
    sgd_step: SGDStep,
    state: TrainState,
    data: Batch,
    key: jax.Array,
    *,
    num_epochs: int,
    num_minibatches: int,
    unroll: bool = False,
) -> tuple[TrainState, UpdateOutput]:
    """``num_epochs`` passes of ``num_minibatches`` SGD steps over ``data`` ``[rows, ...]``, each
    minibatch a set of whole rows (recurrent PPO's update shape: a row is an env sequence that
    is unrolled from its start, so its steps stay together).

    Each pass orders this device's rows at random and splits them into ``num_minibatches``
    disjoint parts of ``rows / num_minibatches``; minibatch ``i`` is part ``i``, laid out as
    ``data`` is. A row's place in the order is drawn from ``fold_in(epoch_key, global_row_index)``;
    on several devices each splits its own rows (minibatch ``i`` is the union of every device's
    part ``i``). ``unroll``: as ``minibatch_epochs``.
    """
    rows = jax.tree_util.tree_leaves(data)[0].shape[0]
    if rows % num_minibatches:
        raise ValueError(f"{rows} sequences are not divisible into {num_minibatches} minibatches")
    part = rows // num_minibatches

    def epoch(state: TrainState, epoch_key: jax.Array) -> tuple[TrainState, Mapping[str, jax.Array]]:
        def minibatch(state: TrainState, i: jax.Array) -> tuple[TrainState, Mapping[str, jax.Array]]:
            # (drawn inside the loop that uses them: see minibatch_epochs)
            order = jnp.argsort(jax.vmap(jax.random.uniform)(global_row_keys(epoch_key, rows)))
            index = jax.lax.dynamic_slice_in_dim(order, i * part, part)
            state, metrics, _ = sgd_step(state, jax.tree_util.tree_map(lambda x: x[index], data))
            return state, metrics

        return _loop(minibatch, state, jnp.arange(num_minibatches), num_minibatches, unroll)

    state, metrics = _loop(epoch, state, jax.random.split(key, num_epochs), num_epochs, unroll)
    metrics = jax.tree_util.tree_map(lambda m: jnp.mean(m, axis=(0, 1)), metrics)
    return state, UpdateOutput(metrics, num_epochs * num_minibatches)
