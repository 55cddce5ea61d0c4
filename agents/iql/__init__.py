"""IQL: implicit Q-learning (expectile value, TD critics, advantage-weighted policy), trained offline."""

from shoal.agents.iql.builder import IQLBuilder
from shoal.agents.iql.config import IQLConfig

__all__ = ["IQLBuilder", "IQLConfig"]
