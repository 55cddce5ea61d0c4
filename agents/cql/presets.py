"""CQL presets. In an offline run ``max_env_steps`` and ``eval_every`` count learner SGD steps
(no env is stepped for training; ``docs/offline-data.md``).

* ``classic`` -- tuned here on a CartPole-v1 dataset of 50k steps (a partly trained DQN with 20%
  random actions, ``benchmarks/offline.py``): the defaults, 30k SGD steps, evaluations every 1,000.
  On continuous classic tasks (Pendulum-v1) the same: continuous CQL's settings (``alpha`` 5.0)
  are its defaults, measured on a Pendulum dataset (``benchmarks/offline_pendulum.py``).
"""

from shoal.agents.presets import Preset

PRESETS = [
    Preset(
        "cql",
        "classic",
        "tuned here on a CartPole-v1 dataset (benchmarks/offline.py)",
        experiment={"max_env_steps": 30_000, "eval_every": 1_000},
    ),
]
