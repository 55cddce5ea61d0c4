"""IMPALA presets.

* ``classic`` -- the defaults, tuned here on CartPole-v1.
* ``atari`` -- the IMPALA paper's Atari settings (Espeholt et al., 2018, table G.1): unrolls of
  20 steps, batches of 32 of them, the deep ResNet torso, learning rate 6e-4, entropy 0.01,
  baseline 0.5, gradient norm 40, gamma 0.99 (with Adam where the paper used RMSProp). The
  published 10M-step budget (here in agent steps), evaluations of 8 whole games every 100k,
  acting by the policy's samples.
"""

from shoal.agents.presets import Preset

PRESETS = [
    Preset("impala", "classic", "tuned here on CartPole-v1"),
    Preset(
        "impala",
        "atari",
        "Espeholt et al. (2018), table G.1",
        settings={
            "rollout_length": 20,
            "sequences_per_update": 32,
            "torso": "impala",
            "learning_rate": 6e-4,
            "entropy_coef": 0.01,
            "baseline_coef": 0.5,
            "max_gradient_norm": 40.0,
            "discount": 0.99,
            "eval_sample": True,
        },
        experiment={"num_envs": 8, "max_env_steps": 10_000_000, "eval_every": 100_000, "eval_episodes": 8},
    ),
]
