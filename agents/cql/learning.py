"""Discrete CQL's loss (Kumar et al. 2020, CQL(H)), on DQN's loss seam.

For a batch of n-step transitions ``(s, a, R, d, s')`` from a fixed dataset (``a`` the
dataset's action):

    a*     = argmax_a' Q(s', a'; online)                      # double Q, as DQN (double_q=False:
                                                               #   y = R + d * max_a' Q(s', a'; target))
    y      = R + d * Q(s', a*; target)
    td     = Q(s, a; online) - y
    loss   = mean_i  huber(td_i) + alpha * (logsumexp_b Q(s_i, b; online) - Q(s_i, a_i; online))

The second term pushes Q down on every action (softly, on the largest) and up on the action the
data took: actions the dataset never tried cannot look better than those it did, which is what
plain DQN on a fixed dataset gets wrong (its argmax picks the over-estimated, unseen actions).
With action masks the logsumexp runs over the allowed actions. Everything else -- the
optimizer, the target network, the scanned SGD steps, the greedy policy -- is DQN's
(``shoal.agents.dqn.learning.make_update``, which takes this as its ``loss``).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import optax

from shoal.agents.components.dict_observations import action_mask, mask_logits
from shoal.agents.dqn.learning import LossOutput, double_q_td
from shoal.core.types import Batch


def cql_loss(
    network: Any,
    params: optax.Params,
    target_params: optax.Params,
    batch: Batch,
    huber_delta: float,
    alpha: float,
    double_q: bool = True,
) -> LossOutput:
    """The loss in the module docstring, per transition (``LossOutput``: its ``td_abs`` is the
    TD error's alone)."""
    q_tm1, q_taken, td = double_q_td(network, params, target_params, batch, double_q)  # (DQN's, as above)
    conservative = jax.nn.logsumexp(mask_logits(q_tm1, action_mask(batch["observation"])), axis=-1) - q_taken
    return LossOutput(optax.huber_loss(td, delta=huber_delta) + alpha * conservative, jnp.abs(td), q_taken)


__all__ = ["cql_loss"]
