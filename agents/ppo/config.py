"""PPO hyperparameters. Defaults are tuned for CartPole-v1 (16 envs) on a 2-core CPU; the presets
(``shoal.agents.ppo.presets``) tune them for other task families."""

from __future__ import annotations

import dataclasses

from shoal.core.settings import setting


@dataclasses.dataclass
class PPOConfig:
    """PPO settings.

    Attributes:
      learning_rate: Adam step size (at the start of the run, with a ``linear`` schedule).
      learning_rate_schedule: ``constant``, or ``linear``: the step size decays linearly to 0
        over ``schedule_env_steps`` (CleanRL's ``anneal_lr``, RL-Zoo's ``lin_``); it is set once
        per update from the env steps trained on before it (module docstring of
        ``shoal.agents.ppo.learning``).
      rollout_length: vector steps per rollout (one replay item holds ``rollout_length`` steps of
        every env of one actor).
      rollouts_per_update: rollouts (replay items) per learner update.
      num_epochs: passes over each update's rollouts.
      num_minibatches: SGD steps per pass; each takes ``rollout_length / num_minibatches``
        random steps of every env sequence (so it must divide ``rollout_length``), or with an
        ``lstm_size`` the whole sequences of ``1 / num_minibatches`` of the envs.
      discount: gamma.
      gae_lambda: lambda of generalized advantage estimation.
      clip_epsilon: the policy ratio is clipped to ``[1 - eps, 1 + eps]`` (at the start of the
        run, with a ``linear`` schedule).
      clip_schedule: ``constant``, or ``linear``: ``clip_epsilon`` decays like the learning rate.
      clip_value_loss: clip the value loss as CleanRL's ``clip_vloss``: the new value may move
        at most ``eps`` (the current ``clip_epsilon``) from the value the update started from,
        and the loss is the larger of the clipped and the unclipped squared error.
      schedule_env_steps: env steps (over all envs and actors, as ``max_env_steps`` counts them)
        over which a ``linear`` schedule decays to 0 (past it the rate stays 0); an experiment
        (``ExperimentConfig``) sets it to its ``max_env_steps`` where it is 0. The schedules count the env steps of the rollouts trained on (a rollout
        dropped for ``max_policy_lag`` does not count). Recorded with the run's config, so a
        resumed run keeps the same horizon; 0 (unset) is refused while a schedule is ``linear``.
      value_coef / entropy_coef: weights of the value loss and the entropy bonus.
      max_gradient_norm: global gradient-norm clip.
      normalize_advantages: standardize advantages per minibatch (over all devices).
      hidden_sizes: widths of the policy's and the value function's hidden layers (two MLPs).
      activation: the nonlinearity of those MLPs' hidden layers: ``tanh`` (CleanRL's and SB3's
        PPO) or ``relu`` (gymnax-blines'); a feed-forward network's MLPs only (not with
        ``lstm_size``, a Dict observation or a convolutional ``torso``).
      orthogonal_init: those MLPs' kernels start orthogonal, gain ``sqrt(2)`` in the hidden
        layers, 0.01 in the policy's output and 1 in the value's (CleanRL's ``layer_init``,
        SB3's ``ortho_init``); ``false``: flax's default, LeCun normal (gymnax-blines', but for
        its biases). Where ``activation`` applies only.
      torso: for image observations (rank-3 uint8 frames): the convolutional torso, ``nature``
        (the Nature DQN network), ``impala`` (the IMPALA ResNet), ``minatar`` (MinAtar's one
        convolution and dense 128) or ``auto`` (``nature`` for frames of 36x36 or more, else
        ``minatar``); ``hidden_sizes`` then do not apply. Or ``mlp``: no convolution, the frames
        scaled to [0, 1] and flattened into the two MLPs of ``hidden_sizes`` (with
        ``hidden_sizes=(256, 256)``, ``activation=relu`` and ``orthogonal_init=false``,
        gymnax-blines' network for MinAtar; a categorical, feed-forward policy, not a Dict
        observation).
      lstm_size: 0 for a feed-forward PPO; otherwise recurrent PPO: the torso (``hidden_sizes``,
        or the convolutional ``torso``) feeds an LSTM of this many units that the policy and the
        value read (``shoal.agents.ppo.recurrent``). Its minibatches are whole env sequences, so
        ``num_minibatches`` must divide the env sequences per update on each device
        (``rollouts_per_update x num_envs / devices``) instead of ``rollout_length``.
      initial_log_std: for continuous (Box) actions: the Gaussian policy's state-independent
        log standard deviation at the start (a learned parameter).
      normalize_observations: normalize observations with the run's running mean and variance
        (``shoal.agents.components.normalization``; the learner keeps one set of statistics, actors and the
        evaluator get them with the params, checkpoints keep them).
      normalize_rewards: scale rewards by the running standard deviation of the discounted
        return (actors record each env's discounted return; the learner keeps the statistics).
      eval_sample: evaluate the policy's samples, not its most likely action (the Atari preset:
        a greedy Breakout policy that never serves plays to the 108k-frame cap).
      variable_update_period: vector steps between an actor's parameter pulls.
      max_policy_lag: (distributed) a rollout acted with params more than this many learner
        updates old is dropped, not trained on; drops are counted and the lag is logged.
      queue_capacity: rollouts the replay queue holds; actors wait while it is full.
    """

    learning_rate: float = setting(1e-3, low=0.0, low_open=True, high=1.0)
    learning_rate_schedule: str = "constant"
    rollout_length: int = setting(32, low=1, high=100_000)
    rollouts_per_update: int = setting(1, low=1, high=10_000)
    num_epochs: int = setting(4, low=1, high=10_000)
    num_minibatches: int = setting(4, low=1, high=100_000)
    discount: float = setting(0.99, low=0.0, high=1.0)
    gae_lambda: float = setting(0.95, low=0.0, high=1.0)
    clip_epsilon: float = setting(0.2, low=0.0, low_open=True, high=10.0)
    clip_schedule: str = "constant"
    clip_value_loss: bool = False
    schedule_env_steps: int = setting(0, low=0, high=10**13)
    value_coef: float = setting(0.5, low=0.0, high=1_000.0)
    entropy_coef: float = setting(0.01, low=0.0, high=1_000.0)
    max_gradient_norm: float = setting(0.5, low=0.0, low_open=True)
    normalize_advantages: bool = True
    hidden_sizes: tuple[int, ...] = setting((64, 64), low=1, high=65_536, items=True)
    activation: str = "tanh"
    orthogonal_init: bool = True
    torso: str = "auto"
    lstm_size: int = setting(0, low=0, high=65_536)
    initial_log_std: float = setting(0.0, low=-20.0, high=5.0)
    normalize_observations: bool = False
    normalize_rewards: bool = False
    eval_sample: bool = False
    variable_update_period: int = setting(1, low=1, high=1_000_000)
    max_policy_lag: int = setting(8, low=0)
    queue_capacity: int = setting(8, low=1, high=1_000_000)


SCHEDULES = ("constant", "linear")


def check_schedules(config: PPOConfig) -> None:
    """Raises ``ValueError`` (one line) for an unknown schedule, or a ``linear`` one without a
    horizon (``schedule_env_steps`` 0)."""
    for name in ("learning_rate_schedule", "clip_schedule"):
        value = getattr(config, name)
        if value not in SCHEDULES:
            raise ValueError(f"{name} must be one of {', '.join(SCHEDULES)}, got {value!r}")
    linear = [name for name in ("learning_rate_schedule", "clip_schedule") if getattr(config, name) == "linear"]
    if linear and config.schedule_env_steps == 0:
        raise ValueError(
            f"{' and '.join(f'{name}=linear' for name in linear)} decays over schedule_env_steps, "
            "which is unset (0): set it to the run's env-step budget, e.g. "
            "--set schedule_env_steps=10000000"
        )
