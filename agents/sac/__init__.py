"""SAC: soft actor-critic with twin critics and automatic entropy tuning (continuous actions)."""

from shoal.agents.sac.builder import SACBuilder
from shoal.agents.sac.config import SACConfig
from shoal.agents.sac.networks import SACNetworks, make_networks

__all__ = ["SACBuilder", "SACConfig", "SACNetworks", "make_networks"]
