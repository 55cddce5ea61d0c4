"""IMPALA's networks: a categorical policy and a value function (``shoal.agents.components.networks.ActorCritic``)."""

from __future__ import annotations

from collections.abc import Sequence

from shoal.agents.components.networks import ActorCriticNetworks, make_actor_critic_networks
from shoal.core.specs import EnvironmentSpec

IMPALANetworks = ActorCriticNetworks


def make_networks(
    spec: EnvironmentSpec, hidden_sizes: Sequence[int] = (64, 64), torso: str = "auto"
) -> ActorCriticNetworks:
    """Categorical policy and value: MLPs for flat observations, a shared convolutional
    ``torso`` for image observations."""
    return make_actor_critic_networks(spec, hidden_sizes, "IMPALA", torso=torso)
