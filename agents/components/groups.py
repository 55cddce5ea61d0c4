"""A policy per group of agents: one copy of a network's parameters per group, each row answered
by its agent's group's copy (``shoal train --agent-group``; ``shoal.envs.multiagent``).

A multi-agent env's rows (one per env copy and agent) carry the agent's identity, a one-hot of
its index (the last ``num_agents`` entries of a vector observation, or the ``agent_id`` key of a
Dict one). ``GroupedNetwork`` wraps a flax module so that

* ``init(key, ...)`` makes ``num_groups`` independent sets of parameters (each group's key split
  from ``key``), stacked on a leading axis: ``params[g]`` is group ``g``'s;
* ``apply(params, observation, ...)`` runs the module once per group (``jax.vmap`` over that
  axis) and gives each row the output of its own group's parameters, the group read off the
  row's identity (``argmax`` of the one-hot: an observation normalizer's per-feature affine map
  keeps it). Outputs that are not per row (a Gaussian policy's state-independent ``log_std``)
  become per row the same way.

So every group's parameters, and its optimizer state (optax keeps one per parameter), are its
own: a group's gradient comes from its own rows only, and an actor acts for each row with that
row's group's copy. The groups share what the run has one of: the replay table, the batches
(every batch holds every row), the update's schedule, and a global-norm gradient clip. A group
costs a network's forward pass on every row (the unused ones are discarded): fine for a few
groups of small networks. Recurrent networks (an LSTM core and its state) are refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from shoal.envs.multiagent import AGENT_ID


class GroupedNetwork:
    """``network`` with one set of parameters per group (see the module docstring).

    ``groups[i]`` is the group (``0 .. num_groups-1``) of agent ``i``; ``identity`` where a row's
    one-hot sits: ``"tail"`` (the last ``len(groups)`` entries of a vector observation) or
    ``"key"`` (the ``agent_id`` entry of a Dict one). Other attributes are ``network``'s."""

    def __init__(self, network: nn.Module, groups: Sequence[int], num_groups: int, identity: str) -> None:
        if identity not in ("tail", "key"):
            raise ValueError(f"identity must be 'tail' or 'key', got {identity!r}")
        if sorted(set(groups)) != list(range(num_groups)):
            raise ValueError(f"groups {list(groups)} must use each of 0..{num_groups - 1}")
        self.inner = network
        self.groups = tuple(int(g) for g in groups)
        self.num_groups = num_groups
        self.identity = identity

    def __getattr__(self, name: str) -> Any:  # (the module's own attributes: lstm_size, keys, torso, ...)
        if name.startswith("__") or name in ("inner", "groups", "num_groups", "identity"):
            raise AttributeError(name)
        return getattr(self.inner, name)

    def __repr__(self) -> str:
        return f"GroupedNetwork({type(self.inner).__name__}, groups={list(self.groups)})"

    def init(self, key: jax.Array, *args: Any, **kwargs: Any) -> Any:
        """``num_groups`` sets of ``network.init``'s parameters, stacked on a leading axis."""
        return jax.vmap(lambda k: self.inner.init(k, *args, **kwargs))(jax.random.split(key, self.num_groups))

    def apply(self, params: Any, observation: Any, *args: Any, method: Any = None, **kwargs: Any) -> Any:
        """``network.apply``, each row with its group's parameters (``observation`` first, batched
        on its leading axes as the module takes it; other arguments batched likewise)."""
        method = getattr(method, "__name__", method)

        def run(p: Any, x: Any, *rest: Any) -> Any:
            return self.inner.apply(p, x, *rest, method=method, **kwargs)

        stacked = jax.vmap(run, in_axes=(0, None) + (None,) * len(args))(params, observation, *args)
        group = self.group_of(observation)
        # Which outputs are per row: those whose leading size follows the batch's (traced shapes only).
        one = jax.tree_util.tree_map(lambda p: p[0], params)
        doubled = jax.tree_util.tree_map(lambda x: jnp.concatenate([x, x]), (observation,) + tuple(args))
        probe = jax.eval_shape(lambda xs: run(one, *xs), doubled)
        return jax.tree_util.tree_map(
            lambda out, shape: _pick(out, group, shape.shape != out.shape[1:]), stacked, probe
        )

    def group_of(self, observation: Any) -> jax.Array:
        """Each row's group (``observation``'s leading axes), from its agent's one-hot."""
        n = len(self.groups)
        if self.identity == "key":
            if not isinstance(observation, dict) or AGENT_ID not in observation:
                raise ValueError(
                    f"a grouped network reads each row's agent from its {AGENT_ID!r} observation key; "
                    f"got {type(observation).__name__}"
                )
            one_hot = observation[AGENT_ID]
        else:
            one_hot = observation[..., -n:]
        return jnp.asarray(np.asarray(self.groups, np.int32))[jnp.argmax(one_hot, axis=-1)]


def _pick(stacked: jax.Array, group: jax.Array, per_row: bool) -> jax.Array:
    """``stacked[group[r], r]`` for every row ``r`` (``per_row``), or ``stacked[group[r]]`` for an
    output shared by all rows (then given a leading row axis)."""
    lead = group.shape
    picked = stacked[0]
    for g in range(1, stacked.shape[0]):
        out = stacked[g]
        extra = out.ndim - (len(lead) if per_row else 0)
        picked = jnp.where((group == g).reshape(lead + (1,) * extra), out, picked)
    if not per_row and stacked.shape[0] == 1:
        picked = jnp.broadcast_to(picked, lead + picked.shape)
    return picked


def group_networks(networks: Any, groups: Sequence[int], num_groups: int, identity: str) -> Any:
    """``networks`` (a NamedTuple of flax modules and their facts, as every Shoal agent's) with
    each module a ``GroupedNetwork``; a one-line ``ValueError`` for networks it cannot group."""
    if not hasattr(networks, "_replace"):
        raise ValueError(
            f"a policy per group needs the agent's networks as a NamedTuple of flax modules "
            f"(as Shoal's agents have them), got {type(networks).__name__}"
        )
    modules = {name: value for name, value in networks._asdict().items() if isinstance(value, nn.Module)}
    if not modules:
        raise ValueError(f"a policy per group found no flax module in the agent's {type(networks).__name__}")
    for name, module in modules.items():
        if getattr(module, "lstm_size", 0):
            raise ValueError(
                f"a policy per group takes feed-forward networks; this agent's {name} is recurrent "
                f"({type(module).__name__}, lstm_size={module.lstm_size}): share one policy "
                "(no --agent-group) or set lstm_size=0"
            )
    return networks._replace(
        **{name: GroupedNetwork(module, groups, num_groups, identity) for name, module in modules.items()}
    )


__all__ = ["GroupedNetwork", "group_networks"]
