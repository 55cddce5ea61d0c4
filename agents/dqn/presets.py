"""DQN presets.

* ``classic`` -- the defaults, tuned here on CartPole-v1 (15 seeds on a 2-core CPU): a 64x64
  Q-network, learning rate 4e-3, replay ratio 32, 3-step returns.
* ``box2d`` -- RL-Zoo's DQN for LunarLander (rl-baselines3-zoo ``hyperparams/dqn.yml``): learning
  rate 6.3e-4, batch 128, a 50k replay, target update every 250 steps, one SGD step of 128 per
  env step (train_freq 4 x gradient_steps 4: a replay ratio of 128), epsilon from 1 to 0.1 over
  the first 12k env steps, a 256x256 network, 1-step returns. A 1M-step budget, evaluations
  every 20k env steps.
* ``atari`` -- CleanRL's ``dqn_atari.py``: learning rate 1e-4, batch 32, a 1M replay, one SGD
  step per 4 env steps (a replay ratio of 8), the target network updated every 1,000 env steps
  (250 SGD steps), epsilon from 1 to 0.01 over the first 1M env steps, 1-step returns, the Nature
  CNN. Learning starts after 10k env steps (CleanRL waits 80k in its 10M-step runs; 10k lets a
  short run learn). The published 10M-step budget, evaluations of 8 whole games every 100k
  with epsilon 0.05 (CleanRL's evaluation; a greedy policy may never serve in Breakout).
* ``minatar`` -- the MinAtar paper's DQN (Young & Tian, 2019; MinAtar's ``examples/dqn.py``):
  learning rate 2.5e-4, batch 32, a 100k replay, learning after 5k frames, one SGD step per frame
  (a replay ratio of 32), the target network copied every 1,000 SGD steps, epsilon from 1 to 0.1
  over the first 100k frames, 1-step returns, the target net's max as the target (not Shoal's
  double Q: ``double_q=false``), the Huber loss, the MinAtar network (conv 16 3x3, dense 128). The
  published 5M-frame budget; evaluations of 10 episodes every 100k frames with epsilon 0.01. On
  gymnax's five games (seed 0, 1M env steps) the paper's target beat double Q on each (training
  returns: Freeway 39.8 against 30.6, Breakout 11.9 / 8.9, Asterix 13.4 / 7.1, SpaceInvaders 48.4
  / 44.3, Seaquest 2.3 / 1.9); ``--set double_q=true`` gives double Q back. Where Shoal differs:
  Adam (the paper: centred RMSProp with squared-gradient momentum 0.95 and minimum squared
  gradient 0.01, ``--set optimizer=rmsprop``; on gymnax's Freeway, seed 0 at 1M with double Q, it
  never learned to cross where Adam reached 30.6), gradients clipped at norm 10, 4 envs stepped
  together (the paper: 1), and the evaluation (the paper plots the returns of the training
  episodes, under exploration).
* ``gymnax-minatar`` -- the same DQN (the ``minatar`` preset's settings, budget and evaluations)
  for gymnax's MinAtar games in the compiled loop (``gymnax:<Game>-MinAtar``, ``--launcher
  anakin``: the replay buffer on the device). At 1M env steps, seeds 0-4 (the ``minatar``
  preset's records, the same settings; ``benchmarks/minatar_presets.py --preset dqn/minatar
  --max-env-steps 1000000``, 20-35 minutes a run on a 2-core CPU), the training return stands
  beside the MinAtar paper's own DQN curve at 1M in ``published.md`` (the runs before 2026-11-29
  read gymnax's planes with a 64x64 MLP, not the MinAtar network: ``torso=mlp`` rows there; the
  runs before 2026-11-30 had the double-Q target: ``double_q=true`` rows).
"""

from shoal.agents.presets import Preset

# The MinAtar paper's DQN (examples/dqn.py): the minatar and gymnax-minatar presets
MINATAR_DQN = {
    "learning_rate": 2.5e-4,
    "batch_size": 32,
    "max_replay_size": 100_000,
    "min_replay_size": 5_000,
    "samples_per_insert": 32.0,
    "target_update_period": 1_000,
    "epsilon_end": 0.1,
    "epsilon_decay_steps": 100_000,
    "n_step": 1,
    "double_q": False,  # (the paper's max_a' Q(s', a'; target))
    "huber_delta": 1.0,
    "torso": "minatar",
    "eval_epsilon": 0.01,
}
MINATAR_DQN_EXPERIMENT = {"num_envs": 4, "max_env_steps": 5_000_000, "eval_every": 100_000, "eval_episodes": 10}

PRESETS = [
    Preset("dqn", "classic", "tuned here on CartPole-v1 (15 seeds)"),
    Preset(
        "dqn",
        "box2d",
        "RL-Zoo hyperparams/dqn.yml, LunarLander",
        settings={
            "learning_rate": 6.3e-4,
            "batch_size": 128,
            "max_replay_size": 50_000,
            "min_replay_size": 1_000,
            "target_update_period": 250,
            "samples_per_insert": 128.0,
            "epsilon_end": 0.1,
            "epsilon_decay_steps": 12_000,
            "hidden_sizes": (256, 256),
            "n_step": 1,
        },
        experiment={"max_env_steps": 1_000_000, "eval_every": 20_000},
    ),
    Preset(
        "dqn",
        "atari",
        "CleanRL dqn_atari.py",
        settings={
            "learning_rate": 1e-4,
            "batch_size": 32,
            "max_replay_size": 1_000_000,
            "min_replay_size": 10_000,
            "samples_per_insert": 8.0,
            "target_update_period": 250,
            "epsilon_end": 0.01,
            "epsilon_decay_steps": 1_000_000,
            "n_step": 1,
            "torso": "nature",
            "eval_epsilon": 0.05,
        },
        experiment={"num_envs": 8, "max_env_steps": 10_000_000, "eval_every": 100_000, "eval_episodes": 8},
    ),
    Preset(
        "dqn",
        "minatar",
        "MinAtar examples/dqn.py (Young & Tian, 2019)",
        settings=MINATAR_DQN,
        experiment=MINATAR_DQN_EXPERIMENT,
    ),
    Preset(
        "dqn",
        "gymnax-minatar",
        "MinAtar examples/dqn.py (Young & Tian, 2019), in the compiled loop",
        settings=MINATAR_DQN,
        experiment=MINATAR_DQN_EXPERIMENT,
    ),
]
