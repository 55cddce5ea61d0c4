"""R2D2 hyperparameters. Defaults are tuned here for the velocity-free CartPole on a 2-core CPU;
the presets (``shoal.agents.r2d2.presets``) give the paper's for Atari."""

from __future__ import annotations

import dataclasses

from shoal.core.settings import setting


@dataclasses.dataclass
class R2D2Config:
    """R2D2 settings (Kapturowski et al., 2019). Replay sizes count sequences.

    Attributes:
      learning_rate: Adam step size.
      adam_epsilon: Adam's epsilon: 1e-8 (optax's and Acme's); the paper's 1e-3 (the Atari preset)
        damps the small gradients of small rewards (measured here: with 1e-3, R2D2 reached 0.12 on
        popgym's PositionOnlyCartPoleEasy, whose steps pay 1/200, in 200k env steps; with 1e-8,
        0.97 by 125k).
      batch_size: sequences per SGD step (the global batch, split across devices).
      burn_in_length: steps at the start of each sequence that only unroll the LSTM from the
        stored state (no loss, no gradient into the state they produce).
      trace_length: steps after the burn-in that are trained on. A sequence is
        ``burn_in_length + trace_length`` steps.
      sequence_period: vector steps between the starts of consecutive sequences (sequences
        overlap by ``burn_in_length + trace_length - sequence_period`` steps).
      discount: gamma.
      n_step: horizon of the n-step double-Q target (module docstring of ``learning``).
      value_rescaling_epsilon: ``eps`` of ``h(x) = sign(x)(sqrt(|x| + 1) - 1) + eps x``.
      hidden_sizes: widths of the tanh layers before the LSTM (flat observations).
      torso: for image observations, as DQN's (``nature``, ``impala``, ``minatar``, ``auto``).
      lstm_size: units of the LSTM.
      head_size: width of the hidden layer of each dueling head (0: a linear Q head).
      target_update_period: SGD steps between copies of the online params to the target net.
      samples_per_insert: sequences sampled per sequence inserted (the table's rate limiter).
      samples_per_insert_tolerance: how far (a fraction of ``samples_per_insert *
        min_replay_size``, in samples) the ratio may drift before one side is blocked.
      min_replay_size: sequences in replay before learning starts.
      max_replay_size: replay capacity in sequences; the oldest are dropped first.
      priority_exponent: sampling ``P(i) ∝ p_i ** priority_exponent``.
      max_priority_weight: ``eta`` of a sequence's priority ``eta max|TD| + (1 - eta) mean|TD|``.
      importance_sampling_exponent: the loss of sequence ``i`` is weighted by ``P(i) **
        -importance_sampling_exponent``, normalized by the batch's largest weight.
      epsilon_base / epsilon_alpha: each env draws the epsilon of each of its episodes from
        Ape-X's ``epsilon_base ** (1 + epsilon_alpha * i / 255)``, ``i`` uniform in 0..255.
      eval_epsilon: epsilon of the evaluation policy (0: greedy).
      max_gradient_norm: global gradient-norm clip.
      variable_update_period: vector steps between an actor's parameter pulls.
    """

    learning_rate: float = setting(1e-3, low=0.0, low_open=True, high=1.0)
    adam_epsilon: float = setting(1e-8, low=0.0, low_open=True, high=1.0)
    batch_size: int = setting(32, low=1, high=1_000_000)
    burn_in_length: int = setting(10, low=0, high=100_000)
    trace_length: int = setting(20, low=1, high=100_000)
    sequence_period: int = setting(10, low=1, high=100_000)
    discount: float = setting(0.99, low=0.0, high=1.0)
    n_step: int = setting(5, low=1, high=1_000)
    value_rescaling_epsilon: float = setting(1e-3, low=0.0, high=1.0)
    hidden_sizes: tuple[int, ...] = setting((64,), low=1, high=65_536, items=True)
    torso: str = "auto"
    lstm_size: int = setting(64, low=1, high=65_536)
    head_size: int = setting(0, low=0, high=65_536)
    target_update_period: int = setting(100, low=1)
    samples_per_insert: float = setting(16.0, low=0.0, low_open=True, high=10_000.0)
    samples_per_insert_tolerance: float = setting(0.1, low=0.0, low_open=True, high=1_000.0)
    min_replay_size: int = setting(200, low=1)
    max_replay_size: int = setting(10_000, low=1, high=1_000_000_000)
    priority_exponent: float = setting(0.9, low=0.0, high=10.0)
    max_priority_weight: float = setting(0.9, low=0.0, high=1.0)
    importance_sampling_exponent: float = setting(0.6, low=0.0, high=1.0)
    epsilon_base: float = setting(0.4, low=0.0, high=1.0)
    epsilon_alpha: float = setting(7.0, low=0.0, high=100.0)
    eval_epsilon: float = setting(0.0, low=0.0, high=1.0)
    max_gradient_norm: float = setting(40.0, low=0.0, low_open=True)
    variable_update_period: int = setting(1, low=1, high=1_000_000)

    @property
    def sequence_length(self) -> int:
        return self.burn_in_length + self.trace_length
