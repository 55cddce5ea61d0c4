"""CQL: the conservative term on DQN's loss (discrete actions) or SAC's (continuous), trained offline on a dataset."""

from shoal.agents.cql.builder import CQLBuilder
from shoal.agents.cql.config import CQLConfig

__all__ = ["CQLBuilder", "CQLConfig"]
