"""IQL presets. In an offline run ``max_env_steps`` and ``eval_every`` count learner SGD steps
(no env is stepped for training; ``docs/offline-data.md``).

* ``classic`` -- tuned here on a CartPole-v1 dataset of 50k steps (``benchmarks/offline.py``): the
  defaults, 30k SGD steps, evaluations every 1,000.
"""

from shoal.agents.presets import Preset

PRESETS = [
    Preset(
        "iql",
        "classic",
        "tuned here on a CartPole-v1 dataset (benchmarks/offline.py)",
        experiment={"max_env_steps": 30_000, "eval_every": 1_000},
    ),
]
