"""IQL presets. In an offline run ``max_env_steps`` and ``eval_every`` count learner SGD steps
(no env is stepped for training; ``docs/offline-data.md``).

* ``classic`` -- tuned here on a CartPole-v1 dataset of 50k steps (a partly trained DQN with 20%
  random actions, ``benchmarks/offline.py``): 64x64 networks, learning rate 1e-3, Polyak step
  0.02, beta 10 (expectile 0.7 as the paper); 30k SGD steps, evaluations every 1,000: 475 on
  seeds 0-2 at 8-10k SGD steps, and 500 in every evaluation after. With 64x64 networks and the
  paper's learning rate 3e-4 and Polyak step 0.005 (the defaults, for MuJoCo) the values were
  still rising at 30k SGD steps and the greedy policy stayed near BC's (250-350) with beta 3;
  with beta 10, seed 0 reached 475 at 16k, seed 1 not by 30k (``docs/offline-data.md``).
"""

from shoal.agents.presets import Preset

PRESETS = [
    Preset(
        "iql",
        "classic",
        "tuned here on a CartPole-v1 dataset (benchmarks/offline.py)",
        settings={"hidden_sizes": (64, 64), "learning_rate": 1e-3, "tau": 0.02, "beta": 10.0},
        experiment={"max_env_steps": 30_000, "eval_every": 1_000},
    ),
]
