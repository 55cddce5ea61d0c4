"""BC: behaviour cloning of a dataset's actions (cross-entropy, or MSE for continuous actions), offline."""

from shoal.agents.bc.builder import BCBuilder
from shoal.agents.bc.config import BCConfig

__all__ = ["BCBuilder", "BCConfig"]
