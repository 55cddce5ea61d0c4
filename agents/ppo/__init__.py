"""PPO: clipped policy-gradient on on-policy rollouts, with GAE (Schulman et al., 2017)."""

from shoal.agents.components.networks import ActorCritic
from shoal.agents.ppo.builder import PPOBuilder
from shoal.agents.ppo.config import PPOConfig
from shoal.agents.ppo.networks import PPONetworks, make_networks

__all__ = ["ActorCritic", "PPOBuilder", "PPOConfig", "PPONetworks", "make_networks"]
