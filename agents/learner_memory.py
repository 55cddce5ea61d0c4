"""How much memory a config's learner needs, from shapes alone (``jax.eval_shape``: traced, not
allocated), and a refusal of what cannot fit.

The learner holds its training state (parameters, target networks, optimiser moments: each
builder's ``init_state``, built-in or plug-in) on each of its devices, and while an update runs also the
gradients and the new parameters (the old ones are not donated: ``get_variables`` may read
them), plus a host copy of the parameters for the actors. The estimate is that sum, a lower
bound: activations, replay and the actors' own copies come on top.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
import psutil

from shoal.core.specs import EnvironmentSpec

# Copies of the parameters beside the training state: gradients, the update's new parameters,
# and the host copy the actors read.
EXTRA_PARAM_COPIES = 3


def _state_shapes(builder: Any, networks: Any) -> Any | None:
    """The shapes of ``builder.init_state(key, networks)`` (traced, not allocated), or ``None``
    for a builder without one (it returns ``None``: not estimated)."""
    init_state = getattr(builder, "init_state", None)
    if init_state is None:
        return None
    key = jax.ShapeDtypeStruct((2,), np.uint32)
    try:
        return jax.eval_shape(lambda k: init_state(k, networks), key)
    except Exception:  # noqa: BLE001 -- networks of another shape (a network_factory's): not estimated
        return None


def _size(tree: Any) -> tuple[int, int]:
    """``(elements, bytes)`` of a tree of shapes."""
    leaves = jax.tree_util.tree_leaves(tree)
    counts = [int(np.prod(x.shape, dtype=np.float64)) for x in leaves]
    return sum(counts), sum(n * np.dtype(x.dtype).itemsize for n, x in zip(counts, leaves))


def learner_bytes(builder: Any, networks: Any) -> tuple[int, int, int] | None:
    """``(parameters, parameter bytes, learner bytes per device)`` of ``builder``'s learner
    with ``networks``, or ``None`` where the builder has no ``init_state`` to trace."""
    state = _state_shapes(builder, networks)
    if state is None:
        return None
    params = state["params"] if isinstance(state, dict) else getattr(state, "params", state)
    count, param_bytes = _size(params)
    return count, param_bytes, _size(state)[1] + EXTRA_PARAM_COPIES * param_bytes


def device_memory() -> tuple[int, str]:
    """``(bytes, what)``: the memory of one of the learner's devices (an accelerator's limit),
    or of this machine (CPU devices share it)."""
    device = jax.local_devices()[0]
    if device.platform != "cpu":
        stats = device.memory_stats() or {}
        if stats.get("bytes_limit"):
            return int(stats["bytes_limit"]), f"{device.device_kind} memory"

    return int(psutil.virtual_memory().total), "this machine's memory"


def _gib(n: float) -> str:
    return f"{n / 2**30:,.1f} GiB"


def check_learner_fits(builder: Any, spec: EnvironmentSpec, networks: Any, num_devices: int) -> None:
    """Raises ``ValueError`` (one line: the estimate and the memory) if the learner's state
    cannot fit in its devices' memory. Costs one trace of ``init_state``, no allocation."""
    del spec  # (the networks carry the shapes)
    sizes = learner_bytes(builder, networks)
    if sizes is None:
        return
    _, param_bytes, per_device = sizes
    memory, what = device_memory()
    shared = jax.local_devices()[0].platform == "cpu"  # CPU devices are one memory
    copies = num_devices if shared else 1
    needed = per_device * copies
    if needed > memory:
        state = (per_device - EXTRA_PARAM_COPIES * param_bytes) * copies
        raise ValueError(
            f"{builder.name}'s networks cannot fit: its learner needs at least {_gib(needed)} (a training "
            f"state of {_gib(state)}: parameters, target networks, optimiser moments; then gradients and "
            f"copies of the parameters{f'; on {copies} devices' if copies > 1 else ''}), more than "
            f"{what} ({_gib(memory)}); choose smaller hidden_sizes"
        )
