"""IQL's networks, each an existing agent's:

* the policy: BC's network (``shoal.agents.bc.networks``: DQN's Q-network body -- an MLP, a
  convolutional torso, or a torso per Dict key -- with logits per discrete action, or a mean per
  action dimension squashed into the Box);
* the value ``V(s)``: the same body with one output;
* the twin critics ``Q1, Q2``: discrete, DQN's Q-network (one value per action), its params
  twice; continuous, SAC's ``TwinCritic`` (``(s, a) -> (Q1, Q2)``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp

from shoal.agents.bc.networks import BCNetworks, make_bc_networks
from shoal.agents.components.flax_apply import apply_network
from shoal.agents.dqn.networks import QNetwork
from shoal.agents.dqn.networks import make_networks as make_q_networks
from shoal.agents.sac.networks import TwinCritic
from shoal.agents.sac.networks import make_networks as make_sac_networks
from shoal.core.specs import EnvironmentSpec
from shoal.core.types import Params, Pytree


class IQLNetworks(NamedTuple):
    policy: BCNetworks  # observations -> logits, or the pre-squash mean (BC's)
    value: QNetwork  # observations -> [batch, 1]
    critic: QNetwork | TwinCritic  # discrete: observations -> [batch, actions] (params twice); continuous: twin
    observation_shape: tuple[int, ...] | dict[str, tuple[int, ...]]

    @property
    def discrete(self) -> bool:
        return self.policy.num_actions is not None


def make_iql_networks(
    spec: EnvironmentSpec, hidden_sizes: Sequence[int] = (256, 256), torso: str = "auto"
) -> IQLNetworks:
    """IQL's networks for ``spec`` (a Discrete action space, or a bounded 1-d Box)."""
    policy = make_bc_networks(spec, hidden_sizes, torso)
    value = make_q_networks(dataclasses.replace(spec, num_actions=1), hidden_sizes, torso).q_network
    if policy.num_actions is not None:
        critic: QNetwork | TwinCritic = make_q_networks(spec, hidden_sizes, torso).q_network
    else:
        critic = make_sac_networks(spec, hidden_sizes).critic  # (SAC's checks: a 1-d Box, finite bounds)
    return IQLNetworks(policy, value, critic, policy.observation_shape)


def init_critic(networks: IQLNetworks, key: jax.Array, observation: Pytree, action: jax.Array) -> Params:
    """The critics' params: ``{"q1", "q2"}`` of one Q-network (discrete), or the twin's."""
    if networks.discrete:
        first, second = jax.random.split(key)
        return {"q1": networks.critic.init(first, observation), "q2": networks.critic.init(second, observation)}
    return networks.critic.init(key, observation, action)


def critic_values(
    networks: IQLNetworks, params: Params, observation: Pytree, action: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """``(Q1(s, a), Q2(s, a))``, each ``[batch]``, of the actions ``a`` taken."""
    if networks.discrete:
        index = action.reshape(-1, 1).astype(jnp.int32)
        return tuple(  # type: ignore[return-value]  # (a pair)
            jnp.take_along_axis(apply_network(networks.critic, params[q], observation), index, axis=-1)[:, 0]
            for q in ("q1", "q2")
        )
    return apply_network(networks.critic, params, observation, action.reshape(action.shape[0], -1))


def value(networks: IQLNetworks, params: Params, observation: Pytree) -> jax.Array:
    """``V(s)``, ``[batch]``."""
    return apply_network(networks.value, params, observation)[:, 0]
