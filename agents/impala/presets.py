"""IMPALA presets.

* ``classic`` -- the defaults, tuned here on CartPole-v1.
"""

from shoal.agents.presets import Preset

PRESETS = [
    Preset("impala", "classic", "tuned here on CartPole-v1"),
]
