"""Recurrent PPO: what changes when the actor-critic has an LSTM core (``lstm_size > 0``).

The update of ``shoal.agents.ppo.learning`` is the same (GAE, the clipped objective, the
schedules); three things differ, as in CleanRL's ``ppo_atari_lstm.py``:

1. the acting policy records the LSTM state it acted from at every step (``core_state`` in its
   extras); the learner starts each env sequence from the state recorded at its first step and
   resets it to zeros where an episode began inside the sequence (``shoal.agents.components.recurrent``);
2. values: ``v_t`` is read off the unroll; ``v'_t`` (the value of step ``t``'s next observation,
   which a truncation bootstraps from) is one more LSTM step from the state after step ``t``, on
   that next observation -- within an episode this is ``v_{t+1}``, exactly;
3. minibatches are whole env sequences (``shoal.learners.sequence_minibatch_epochs``), each
   unrolled from its stored state with the current params, so the gradient flows through time
   over the whole rollout (truncated backpropagation through time at the rollout's start).
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax

from shoal.agents.components import recurrent
from shoal.agents.components.flax_apply import apply_network
from shoal.agents.components.recurrent import STATE_KEY
from shoal.core.types import Params, Pytree


def is_recurrent(network: Any) -> bool:
    return isinstance(network, recurrent.RecurrentActorCritic)


def sequence_inputs(batch: dict) -> dict:
    """What an unroll needs of a batch of env sequences: the state recorded at each first step
    ``[rows, 2H]`` and where episodes begin ``[rows, T]``."""
    return {
        "initial_state": batch["extras"][STATE_KEY][:, 0],
        "first": recurrent.episode_starts(batch["terminated"], batch["truncated"]),
    }


def values(
    network: nn.Module,
    params: Params,
    observation: Pytree,
    next_observation: Pytree,
    inputs: dict,
) -> tuple[jax.Array, jax.Array]:
    """``(v_t, v'_t)`` ``[rows, T]`` (module docstring, 2)."""
    outputs, states = recurrent.unroll(network, params, inputs["initial_state"], observation, inputs["first"])
    _, value = apply_network(network, params, outputs, method="heads")
    _, next_value = apply_network(
        network, params, recurrent.step_from(network, params, states, next_observation), method="heads"
    )
    return value, next_value


def forward(network: nn.Module, params: Params, minibatch: dict) -> tuple[Any, jax.Array]:
    """The policy output and the value at every step of a minibatch of whole sequences."""
    outputs, _ = recurrent.unroll(
        network, params, minibatch["initial_state"], minibatch["observation"], minibatch["first"]
    )
    return apply_network(network, params, outputs, method="heads")


def acting(network: nn.Module, params: Params, observation: Pytree, state: jax.Array) -> tuple[jax.Array, Any]:
    """One acting step: ``(next state, policy output)``."""
    state, out, _ = apply_network(network, params, state, observation)
    return state, out
