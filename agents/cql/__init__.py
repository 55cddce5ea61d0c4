"""CQL (discrete): DQN's double-Q loss plus the conservative term, trained offline on a dataset."""

from shoal.agents.cql.builder import CQLBuilder
from shoal.agents.cql.config import CQLConfig

__all__ = ["CQLBuilder", "CQLConfig"]
