"""R2D2 presets.

* ``classic`` -- the defaults (classic control).
* ``memory`` -- the defaults, tuned here on ``shoal/CartPoleNoVelocity-v1``: sequences of 10
  burn-in and 20 trained steps every 10 vector steps, 5-step double-Q targets with value
  rescaling, batches of 32 sequences, 16 sequences sampled per sequence inserted, an LSTM of 64
  after one tanh layer of 64, a target copy every 100 updates; a 200k-step budget.
* ``atari`` -- the paper (Kapturowski et al., 2019, table 2): sequences of 80 trained steps after
  a burn-in of 40, a new one every 40 steps, 5-step targets, gamma 0.997, value rescaling (no
  reward clipping), Adam at 1e-4 with epsilon 1e-3, batches of 64, a target copy every 2,500
  updates, priority exponent 0.9 and eta 0.9, importance sampling exponent 0.6, 100k sequences of
  replay, the Nature CNN, an LSTM of 512 and dueling heads of 512, actors pulling parameters every
  400 env steps (50 vector steps of 8 envs). From Acme's Atari example (``run_r2d2.py``), where
  the paper gives none: 10k sequences before learning, one sequence sampled per sequence
  inserted. Where Shoal differs: ``ALE/<Game>-v5`` with sticky actions 0.25 (the paper: no
  sticky actions), and the LSTM reads the frames alone (the paper adds the previous action and
  reward). The published 10M-step budget is far beyond a laptop: give one that fits.
"""

from shoal.agents.presets import Preset

PRESETS = [
    Preset("r2d2", "classic", "tuned here on shoal/CartPoleNoVelocity-v1 (the defaults)"),
    Preset(
        "r2d2",
        "memory",
        "tuned here on shoal/CartPoleNoVelocity-v1",
        experiment={"num_envs": 8, "max_env_steps": 200_000, "eval_every": 5_000},
    ),
    Preset(
        "r2d2",
        "atari",
        "Kapturowski et al. 2019, table 2; Acme examples/baselines/rl_discrete/run_r2d2.py",
        settings={
            "burn_in_length": 40,
            "trace_length": 80,
            "sequence_period": 40,
            "n_step": 5,
            "discount": 0.997,
            "learning_rate": 1e-4,
            "adam_epsilon": 1e-3,
            "batch_size": 64,
            "target_update_period": 2_500,
            "priority_exponent": 0.9,
            "max_priority_weight": 0.9,
            "importance_sampling_exponent": 0.6,
            "max_replay_size": 100_000,
            "min_replay_size": 10_000,
            "samples_per_insert": 1.0,
            "torso": "nature",
            "lstm_size": 512,
            "head_size": 512,
            "variable_update_period": 50,
        },
        experiment={
            "num_envs": 8,
            "max_env_steps": 10_000_000,
            "eval_every": 100_000,
            "eval_episodes": 8,
            "clip_rewards": False,
        },
    ),
]
