"""PPO presets.

* ``classic`` -- the defaults, tuned here on CartPole-v1 (16 envs x 32 steps, 4 epochs x 4
  minibatches, learning rate 1e-3).
* ``box2d`` -- RL-Zoo's PPO for LunarLander (rl-baselines3-zoo ``hyperparams/ppo.yml``): 16 envs x
  1,024 steps per rollout, minibatches of 64 (256 per epoch), 4 epochs, gamma 0.999, GAE lambda
  0.98, entropy 0.01, SB3's defaults otherwise (learning rate 3e-4, clip 0.2, 64x64 tanh). A
  1M-step budget.
* ``mujoco`` -- CleanRL's ``ppo_continuous_action.py``: 2,048 env steps per rollout (here 16 envs
  x 128 steps), 10 epochs of 32 minibatches, learning rate 3e-4, gamma 0.99, GAE lambda 0.95,
  clip 0.2, no entropy bonus, gradient norm 0.5, a Gaussian policy with log-std starting at 0,
  observations normalized and rewards scaled by the running return deviation (clipped at 10).
  A 1M-step budget, evaluations of 5 episodes every 20k env steps.
* ``atari`` -- CleanRL's ``ppo_atari.py``: 8 envs x 128 steps, 4 epochs of 4 minibatches, learning
  rate 2.5e-4 (CleanRL anneals it to 0; here it stays), clip 0.1, entropy 0.01, gamma 0.99, GAE
  lambda 0.95, gradient norm 0.5, the Nature CNN. The published 10M-step budget, evaluations of
  8 whole games every 100k env steps, acting by the policy's samples (CleanRL reports the
  returns of its sampling policy; a greedy one may never serve in Breakout).
"""

from shoal.agents.presets import Preset

PRESETS = [
    Preset("ppo", "classic", "tuned here on CartPole-v1"),
    Preset("ppo", "box2d", "RL-Zoo hyperparams/ppo.yml, LunarLander",
           settings={"rollout_length": 1024, "num_minibatches": 256, "num_epochs": 4, "discount": 0.999,
                     "gae_lambda": 0.98, "entropy_coef": 0.01, "learning_rate": 3e-4},
           experiment={"num_envs": 16, "max_env_steps": 1_000_000, "eval_every": 32_768}),
    Preset("ppo", "mujoco", "CleanRL ppo_continuous_action.py",
           settings={"rollout_length": 128, "num_minibatches": 32, "num_epochs": 10, "learning_rate": 3e-4,
                     "discount": 0.99, "gae_lambda": 0.95, "clip_epsilon": 0.2, "entropy_coef": 0.0,
                     "value_coef": 0.5, "max_gradient_norm": 0.5, "normalize_observations": True,
                     "normalize_rewards": True, "initial_log_std": 0.0},
           experiment={"num_envs": 16, "max_env_steps": 1_000_000, "eval_every": 20_480, "eval_episodes": 5}),
    Preset("ppo", "atari", "CleanRL ppo_atari.py",
           settings={"rollout_length": 128, "num_minibatches": 4, "num_epochs": 4, "learning_rate": 2.5e-4,
                     "clip_epsilon": 0.1, "entropy_coef": 0.01, "value_coef": 0.5, "max_gradient_norm": 0.5,
                     "discount": 0.99, "gae_lambda": 0.95, "torso": "nature", "eval_sample": True},
           experiment={"num_envs": 8, "max_env_steps": 10_000_000, "eval_every": 100_000, "eval_episodes": 8}),
]
