"""R2D2: recurrent experience replay in distributed reinforcement learning (Kapturowski et al.,
2019): an LSTM Q-network trained on prioritized sequences from the actors' stored states."""

from shoal.agents.r2d2.builder import R2D2Builder
from shoal.agents.r2d2.config import R2D2Config
from shoal.agents.r2d2.networks import R2D2Networks, RecurrentQNetwork, make_networks

__all__ = ["R2D2Builder", "R2D2Config", "R2D2Networks", "RecurrentQNetwork", "make_networks"]
