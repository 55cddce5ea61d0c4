"""DQN: double Q-learning with n-step returns, a target network and optional prioritized replay."""

from shoal.agents.dqn.builder import DQNBuilder
from shoal.agents.dqn.config import DQNConfig
from shoal.agents.dqn.networks import DQNNetworks, QNetwork, make_networks

__all__ = ["DQNBuilder", "DQNConfig", "DQNNetworks", "QNetwork", "make_networks"]
