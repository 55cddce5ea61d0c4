"""PPO presets.

* ``classic`` -- the defaults, tuned here on CartPole-v1 (16 envs x 32 steps, 4 epochs x 4
  minibatches, learning rate 1e-3).
* ``box2d`` -- RL-Zoo's PPO for LunarLander (rl-baselines3-zoo ``hyperparams/ppo.yml``): 16 envs x
  1,024 steps per rollout, minibatches of 64 (256 per epoch), 4 epochs, gamma 0.999, GAE lambda
  0.98, entropy 0.01, SB3's defaults otherwise (learning rate 3e-4 and clip 0.2, both constant:
  RL-Zoo sets no ``lin_`` schedule for LunarLander; no value clipping; 64x64 tanh). A 1M-step
  budget.
* ``mujoco`` -- CleanRL's ``ppo_continuous_action.py``: 2,048 env steps per rollout (here 16 envs
  x 128 steps, where CleanRL steps 1 env x 2,048), 10 epochs of 32 minibatches, learning rate
  3e-4 annealed linearly to 0 over the budget (``anneal_lr``), gamma 0.99, GAE lambda 0.95,
  clip 0.2, the value loss clipped (``clip_vloss``), no entropy bonus, gradient norm 0.5, a
  Gaussian policy with log-std starting at 0, observations normalized and rewards scaled by the
  running return deviation (both clipped at 10). A 1M-step budget, evaluations of 5 episodes
  every 20k env steps.
* ``atari`` -- CleanRL's ``ppo_atari.py``: 8 envs x 128 steps, 4 epochs of 4 minibatches, learning
  rate 2.5e-4 annealed linearly to 0 over the budget (``anneal_lr``), clip 0.1 (constant, as
  CleanRL; RL-Zoo's Atari PPO anneals it too, ``lin_0.1``), the value loss clipped
  (``clip_vloss``), entropy 0.01, gamma 0.99, GAE lambda 0.95, gradient norm 0.5, the Nature
  CNN. The published 10M-step budget, evaluations of 8 whole games every 100k env steps, acting
  by the policy's samples (CleanRL reports the returns of its sampling policy; a greedy one may
  never serve in Breakout). Where the env differs: Shoal plays ``ALE/<Game>-v5`` whole games
  with sticky actions 0.25 (Machado et al., 2018), where CleanRL trains on ``NoFrameskip-v4``
  with an episode end at each lost life.
* ``minatar`` -- gymnax-blines' PPO for MinAtar (``agents/<Game>-MinAtar/ppo.yaml``, the runs
  behind gymnax's published MinAtar returns): 64 envs x 128 steps, 4 epochs of 8 minibatches,
  learning rate 5e-4 (constant), gamma 0.999, GAE lambda 0.95, clip 0.2, entropy 0.01, value
  0.5, gradient norm 0.5. A 10M-step budget, evaluations of 10 episodes every 200k env steps.
  Where Shoal differs: the MinAtar network (conv 16 3x3, dense 128, shared by both heads) where
  gymnax-blines reads the planes flattened by 256x256 ReLU MLPs, and MinAtar's own envs (sticky
  actions 0.1, no episode cap) where gymnax's have neither. Measured here (1.28M env steps;
  ``benchmarks/results/published.md``, MinAtar Breakout's controlled runs), gymnax-blines'
  network (``benchmarks/gymnax_blines.py``) leaves the 6-7 plateau the MinAtar network holds on
  Breakout (15.3, 12.3, 7.0 on seeds 0-2) and scores higher on SpaceInvaders (71.1 [55.4-101.3]
  against 49.2), but lower on Freeway (35.5 against 45.7) and Asterix (2.3 against 4.0; seed 0
  each), so the preset keeps the MinAtar network. ``--set torso=mlp --set hidden_sizes=256,256
  --set activation=relu --set orthogonal_init=false`` gives gymnax-blines' network, and ``--set
  clip_value_loss=true`` its loss too (gymnax-blines' PPO as its code has it): Breakout 11.0,
  11.4, 8.7 (seeds 0-2), Seaquest 4.4 against 3.1, Freeway and Asterix still lower (33.2, 1.5;
  seed 0). With gymnax's settings (no sticky actions, a 1,000-step cap) that PPO's Breakout
  seeds either hold a 7-brick routine or pass gymnax-blines' 15.7 (median 13.98-14.19, seeds
  0-5); ``--set entropy_coef=0.02`` frees five seeds of six (median 17.23).
* ``gymnax-minatar`` -- for gymnax's own MinAtar games in the compiled loop (``gymnax:<Game>-MinAtar``,
  ``--launcher anakin``): gymnax-blines' PPO (its network: the planes flattened into two 256x256
  ReLU MLPs, flax's default init; its clipped value loss; its rollouts of 128 x 64 envs) with five
  settings found here with ``shoal tune`` on Breakout (``benchmarks/spaces/ppo_breakout_minatar.yaml``,
  1.28M env steps, seed 0; ``benchmarks/results/minatar/tune-ppo-breakout/``): learning rate 9.7e-4
  (gymnax-blines: 5e-4), entropy 1e-3 (0.01), 3 epochs (4) of 16 minibatches (8), discount 0.99
  (0.999). At 1.28M env steps, seeds 0-4, training return (``benchmarks/minatar_presets.py``,
  ``published.md``'s table): at or above gymnax-blines on each of its four logged games, where its
  own settings were below on Breakout (13.65 against 15.7) and Asterix (2.10 against 2.14):
  Breakout 20.54, SpaceInvaders 87.48, Freeway 38.30, Asterix 2.84. Evaluations every 500k env
  steps (one dispatch each). gymnax-blines' own settings: ``--set learning_rate=0.0005 --set
  entropy_coef=0.01 --set num_epochs=4 --set num_minibatches=8 --set discount=0.999`` (Breakout,
  seed 0, 10M env steps: greedy 41.0, training return 35.3, 597 s on a 2-core CPU).
* ``brax`` -- Brax's own PPO for its envs (``brax:<name>``, the compiled loop; Brax's training
  notebook, ``notebooks/training.ipynb``: the settings it gives ``inverted_pendulum`` and
  ``inverted_double_pendulum``, and ``ant``'s but for its 4,096 envs): 2,048 envs, each update 80
  steps of every env (Brax: 16 unrolls of 5 steps, 163,840 env steps), 4 epochs, learning rate
  3e-4 (constant), gamma 0.97, GAE lambda 0.95, clip 0.3, entropy 0.01, observations normalized; a
  50M-step budget (its ant and humanoid runs'), about 20 evaluations. Where Shoal differs: minibatches of 4,096 steps
  (40 a pass, where Brax takes 32 of 5,120: the minibatches must divide the 80 steps), GAE over
  the whole 80 steps (Brax bootstraps every 5), rewards scaled by the running return deviation
  (Brax multiplies them by a fixed ``reward_scaling``, 10 for these envs), the gradient norm
  clipped at 10 (Brax clips none), and Shoal's two tanh MLPs of 64 (Brax: a policy of four swish
  layers of 32, a value of five of 256). Made for an accelerator: on a 2-core CPU one update
  (163,840 env steps) takes minutes; ``--num-envs 64`` trains there, at other settings' pace.
* ``craftax`` -- Craftax's PPO baseline (``MichaelTMatthews/Craftax_Baselines``, ``ppo.py`` and
  ``models/actor_critic.py``, the runs behind the Craftax paper's PPO): 1,024 envs x 64 steps,
  4 epochs of 8 minibatches, learning rate 2e-4 annealed linearly to 0 over the budget, gamma
  0.99, GAE lambda 0.8, clip 0.2 (the value loss clipped too), entropy 0.01, value 0.5, gradient
  norm 1.0, three tanh layers of 512 in each of the policy and the value (orthogonal init); the
  paper's 1B-step budget, about 20 evaluations. Made for an accelerator too (the paper's 1B steps took hours on one GPU).
* ``jaxmarl-mpe`` -- found here with ``shoal tune`` for MAPPO on JaxMARL's ``MPE_simple_spread_v3``
  (``benchmarks/spaces/mappo_spread.yaml``: 24 trials of 1M env steps, 3M agent rows, seed 0, in
  the compiled loop): 128 envs x 32 steps, 10 epochs of 8 minibatches, learning rate 1.57e-3,
  gamma 0.95, GAE lambda 0.98, clip 0.1, entropy 1.4e-4, rewards scaled by the running return
  deviation; 3M agent rows, evaluations of 32 whole episodes every 500k. The same settings serve
  IPPO (without ``--global-state``) and the other MPE tasks of identical agents, untuned there.
  Seeds 0-4 (``benchmarks/mappo_spread.py``; ``benchmarks/results/published.md``): -131.8
  [-134.7, -126.3] on the MAPPO paper's scale (2 x the team return - 75) against the plain
  defaults' -175.1 [-198.7, -171.0] and DI-engine's ~-133 at 1M env steps.
* ``memory`` -- recurrent PPO for tasks that need memory, after RL-Zoo's ``ppo_lstm`` for
  ``CartPoleNoVel-v1`` (rl-baselines3-zoo ``hyperparams/ppo_lstm.yml``): 8 envs x 32 steps, one
  minibatch of all 256 steps, 20 epochs, learning rate 1e-3 and clip 0.2 both annealed linearly
  to 0 over the budget, no entropy bonus, observations normalized and rewards scaled (RL-Zoo's
  ``normalize: true``), an LSTM of 64 units; a 100k-step budget. Where Shoal differs: one tanh
  layer of 64 before the LSTM, which both heads (linear) share, where SB3-contrib gives the
  critic an LSTM of its own and each head a ReLU layer of 64; and gamma 0.99 with GAE lambda
  0.95, tuned here (with RL-Zoo's 0.98 and 0.8, seeds 1 and 3 reached 475 only after 52k and
  55k env steps; with these, seeds 0-4 within 40k).

The schedules decay over ``schedule_env_steps``, which an experiment sets to its own
``max_env_steps`` (the preset's budget, or the one given) unless ``--set`` gives it. As in
CleanRL, the step size is set once per update, from the env steps trained on before it.
"""

from shoal.agents.presets import Preset

# gymnax-blines' MinAtar PPO hyperparameters (agents/<Game>-MinAtar/ppo.yaml): ppo/minatar adds
# Shoal's MinAtar torso, ppo/gymnax-minatar gymnax-blines' own network and clipped value loss
GYMNAX_BLINES_MINATAR = {
    "rollout_length": 128,
    "num_minibatches": 8,
    "num_epochs": 4,
    "learning_rate": 5e-4,
    "discount": 0.999,
    "gae_lambda": 0.95,
    "clip_epsilon": 0.2,
    "entropy_coef": 0.01,
    "value_coef": 0.5,
    "max_gradient_norm": 0.5,
}
# shoal tune on gymnax's Breakout-MinAtar (benchmarks/results/minatar/tune-ppo-breakout/): the
# settings of ppo/gymnax-minatar that differ from gymnax-blines'
TUNED_ON_BREAKOUT = {
    "learning_rate": 9.7e-4,
    "entropy_coef": 1e-3,
    "num_epochs": 3,
    "num_minibatches": 16,
    "discount": 0.99,
}

PRESETS = [
    Preset("ppo", "classic", "tuned here on CartPole-v1"),
    Preset(
        "ppo",
        "box2d",
        "RL-Zoo hyperparams/ppo.yml, LunarLander",
        settings={
            "rollout_length": 1024,
            "num_minibatches": 256,
            "num_epochs": 4,
            "discount": 0.999,
            "gae_lambda": 0.98,
            "entropy_coef": 0.01,
            "learning_rate": 3e-4,
        },
        experiment={"num_envs": 16, "max_env_steps": 1_000_000, "eval_every": 32_768},
    ),
    Preset(
        "ppo",
        "mujoco",
        "CleanRL ppo_continuous_action.py",
        settings={
            "rollout_length": 128,
            "num_minibatches": 32,
            "num_epochs": 10,
            "learning_rate": 3e-4,
            "learning_rate_schedule": "linear",
            "discount": 0.99,
            "gae_lambda": 0.95,
            "clip_epsilon": 0.2,
            "clip_value_loss": True,
            "entropy_coef": 0.0,
            "value_coef": 0.5,
            "max_gradient_norm": 0.5,
            "normalize_observations": True,
            "normalize_rewards": True,
            "initial_log_std": 0.0,
        },
        experiment={"num_envs": 16, "max_env_steps": 1_000_000, "eval_every": 20_480, "eval_episodes": 5},
    ),
    Preset(
        "ppo",
        "atari",
        "CleanRL ppo_atari.py",
        settings={
            "rollout_length": 128,
            "num_minibatches": 4,
            "num_epochs": 4,
            "learning_rate": 2.5e-4,
            "learning_rate_schedule": "linear",
            "clip_epsilon": 0.1,
            "clip_value_loss": True,
            "entropy_coef": 0.01,
            "value_coef": 0.5,
            "max_gradient_norm": 0.5,
            "discount": 0.99,
            "gae_lambda": 0.95,
            "torso": "nature",
            "eval_sample": True,
        },
        experiment={"num_envs": 8, "max_env_steps": 10_000_000, "eval_every": 100_000, "eval_episodes": 8},
    ),
    Preset(
        "ppo",
        "minatar",
        "gymnax-blines agents/<Game>-MinAtar/ppo.yaml",
        settings={**GYMNAX_BLINES_MINATAR, "torso": "minatar"},
        experiment={"num_envs": 64, "max_env_steps": 10_000_000, "eval_every": 200_000, "eval_episodes": 10},
    ),
    Preset(
        "ppo",
        "gymnax-minatar",
        "gymnax-blines agents/<Game>-MinAtar/ppo.yaml, its network and clipped value loss; five settings tuned here",
        settings={
            **GYMNAX_BLINES_MINATAR,
            **TUNED_ON_BREAKOUT,
            "clip_value_loss": True,
            "torso": "mlp",  # (gymnax's planes come as frames: MinAtarPlanes)
            "hidden_sizes": (256, 256),
            "activation": "relu",
            "orthogonal_init": False,
        },
        experiment={"num_envs": 64, "max_env_steps": 10_000_000, "eval_every": 500_000, "eval_episodes": 10},
    ),
    Preset(
        "ppo",
        "brax",
        "Brax's training notebook (notebooks/training.ipynb), its PPO settings for inverted_pendulum",
        settings={
            "rollout_length": 80,
            "num_minibatches": 40,
            "num_epochs": 4,
            "learning_rate": 3e-4,
            "discount": 0.97,
            "gae_lambda": 0.95,
            "clip_epsilon": 0.3,
            "entropy_coef": 0.01,
            "max_gradient_norm": 10.0,
            "normalize_observations": True,
            "normalize_rewards": True,
        },
        experiment={"num_envs": 2048, "max_env_steps": 50_000_000, "eval_every": 2_500_000, "eval_episodes": 32},
    ),
    Preset(
        "ppo",
        "craftax",
        "Craftax_Baselines ppo.py (the Craftax paper's PPO)",
        settings={
            "rollout_length": 64,
            "num_minibatches": 8,
            "num_epochs": 4,
            "learning_rate": 2e-4,
            "learning_rate_schedule": "linear",
            "discount": 0.99,
            "gae_lambda": 0.8,
            "clip_epsilon": 0.2,
            "entropy_coef": 0.01,
            "value_coef": 0.5,
            "clip_value_loss": True,
            "max_gradient_norm": 1.0,
            "hidden_sizes": (512, 512, 512),
        },
        experiment={"num_envs": 1024, "max_env_steps": 1_000_000_000, "eval_every": 50_000_000, "eval_episodes": 32},
    ),
    Preset(
        "ppo",
        "jaxmarl-mpe",
        "shoal tune, MAPPO on JaxMARL's MPE_simple_spread_v3 (benchmarks/spaces/mappo_spread.yaml)",
        settings={
            "rollout_length": 32,
            "num_minibatches": 8,
            "num_epochs": 10,
            "learning_rate": 1.57e-3,
            "discount": 0.95,
            "gae_lambda": 0.98,
            "clip_epsilon": 0.1,
            "entropy_coef": 1.4e-4,
            "normalize_rewards": True,
        },
        experiment={"num_envs": 128, "max_env_steps": 3_000_000, "eval_every": 500_000, "eval_episodes": 32},
    ),
    Preset(
        "ppo",
        "memory",
        "RL-Zoo hyperparams/ppo_lstm.yml, CartPoleNoVel-v1",
        settings={
            "lstm_size": 64,
            "hidden_sizes": (64,),
            "rollout_length": 32,
            "num_minibatches": 1,
            "num_epochs": 20,
            "learning_rate": 1e-3,
            "learning_rate_schedule": "linear",
            "clip_epsilon": 0.2,
            "clip_schedule": "linear",
            "discount": 0.99,
            "gae_lambda": 0.95,
            "entropy_coef": 0.0,
            "normalize_observations": True,
            "normalize_rewards": True,
        },
        experiment={"num_envs": 8, "max_env_steps": 100_000, "eval_every": 2_500},
    ),
]
