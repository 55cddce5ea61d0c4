"""PPO's networks: a categorical or Gaussian policy and a value function (``shoal.agents.components.networks``)."""

from __future__ import annotations

from collections.abc import Sequence

from shoal.agents.components.networks import ActorCriticNetworks, make_actor_critic_networks
from shoal.core.specs import EnvironmentSpec

PPONetworks = ActorCriticNetworks


def make_networks(
    spec: EnvironmentSpec,
    hidden_sizes: Sequence[int] = (64, 64),
    initial_log_std: float = 0.0,
    torso: str = "auto",
    lstm_size: int = 0,
    activation: str = "tanh",
    orthogonal_init: bool = True,
) -> ActorCriticNetworks:
    """Categorical for discrete actions, Gaussian (state-independent log-std) for Box ones; a
    convolutional ``torso`` for image observations; an LSTM core with ``lstm_size``; the MLPs'
    hidden layers ``activation``, their init orthogonal (``orthogonal_init``) or flax's default."""
    return make_actor_critic_networks(
        spec,
        hidden_sizes,
        "PPO",
        continuous=True,
        initial_log_std=initial_log_std,
        torso=torso,
        lstm_size=lstm_size,
        activation=activation,
        orthogonal_init=orthogonal_init,
    )
