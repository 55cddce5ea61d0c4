"""IMPALA: an actor-critic whose learner corrects for lagging actors with V-trace."""

from shoal.agents.impala.builder import IMPALABuilder
from shoal.agents.impala.config import IMPALAConfig
from shoal.agents.impala.networks import IMPALANetworks, make_networks

__all__ = ["IMPALABuilder", "IMPALAConfig", "IMPALANetworks", "make_networks"]
