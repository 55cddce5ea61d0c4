"""Plug-in builders that break their contract, each in one factory (``--agent
tests.faults.broken_agents:NAME``): DQN's builder but for that factory."""

from shoal.agents.dqn import DQNBuilder, DQNConfig


class Broken(DQNBuilder):
    config_class = DQNConfig
    name = "broken"


class KeyErrorInValidate(Broken):
    def validate(self, spec, num_devices):
        return {}["hidden"]


class NoNetworks(Broken):
    def make_networks(self, spec):
        return None


class ZeroDivisionInPolicy(Broken):
    def make_policy(self, networks, spec, evaluation):
        return 1 / 0


class IndexErrorInTables(Broken):
    def make_replay_tables(self, spec, extras=None):
        return [][0]


class MemoryErrorInLearner(Broken):
    def make_learner(self, *args, **kwargs):
        raise MemoryError()


class ExitsInConstructor(Broken):
    def __init__(self, config):
        raise SystemExit("no GPU here")
