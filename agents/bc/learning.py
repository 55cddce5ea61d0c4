"""Behaviour cloning's learning step and policy, written top to bottom.

For a batch of the dataset's transitions ``(s, a)`` (single transitions; rewards are not used),
with ``f(s)`` the network's output:

    discrete:    loss = mean_i  -log softmax(f(s_i))[a_i]                        # cross-entropy
    continuous:  mu(s) = low + (tanh(f(s)) + 1) / 2 * (high - low)                # into the Box
                 loss = mean_i  sum_d (mu(s_i)_d - clip(a_i, low, high)_d)^2     # mean-squared error

(continuous BC is the deterministic policy that regresses the dataset's actions: MSE, not a
Gaussian log-likelihood). With action masks the softmax runs over the allowed actions.
Gradients are averaged over devices (``pmean``), clipped, and applied with Adam; one learner
update is ``sgd_steps_per_update`` such steps in one ``lax.scan``. The policy acts with
``argmax f(s)`` (discrete) or ``mu(s)`` (continuous), in training and evaluation alike.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from shoal.agents.bc.config import BCConfig
from shoal.agents.bc.networks import BCNetworks
from shoal.agents.components.dict_observations import action_mask, example_observation, mask_logits
from shoal.agents.components.flax_apply import apply_network
from shoal.core.types import ActorInfo, Batch, Policy, Pytree
from shoal.learners.updates import AXIS_NAME, UpdateFn, scan_sgd_steps


class TrainingState(NamedTuple):
    params: optax.Params
    opt_state: optax.OptState
    steps: jax.Array


def make_optimizer(config: BCConfig) -> optax.GradientTransformation:
    return optax.chain(optax.clip_by_global_norm(config.max_gradient_norm), optax.adam(config.learning_rate))


def init_state(key: jax.Array, networks: BCNetworks, config: BCConfig) -> TrainingState:
    @jax.jit  # one compiled computation
    def init(key: jax.Array) -> TrainingState:
        params = networks.network.init(key, example_observation(networks.observation_shape))
        return TrainingState(params, make_optimizer(config).init(params), jnp.zeros((), jnp.int32))

    return init(key)


def _as_float(observation: Pytree) -> Pytree:
    return jax.tree_util.tree_map(lambda x: x.astype(jnp.float32), observation)


def squash(out: jax.Array, low: np.ndarray, high: np.ndarray) -> jax.Array:
    """``low + (tanh(out) + 1) / 2 * (high - low)``: the network's output inside the Box."""
    return low + (jnp.tanh(out) + 1.0) * 0.5 * (high - low)


def _bounds(networks: BCNetworks) -> tuple[np.ndarray, np.ndarray]:
    """A continuous policy's Box bounds (flat)."""
    if networks.low is None or networks.high is None:
        raise ValueError("a discrete BC network has no action bounds")
    return networks.low, networks.high


def bc_loss(networks: BCNetworks, params: optax.Params, batch: Batch) -> jax.Array:
    """The loss of the module docstring, per transition ``[batch]``."""
    out = apply_network(networks.network, params, _as_float(batch["observation"]))
    if networks.num_actions is not None:
        log_probs = jax.nn.log_softmax(mask_logits(out, action_mask(batch["observation"])), axis=-1)
        return -jnp.take_along_axis(log_probs, batch["action"][:, None].astype(jnp.int32), axis=-1)[:, 0]
    low, high = _bounds(networks)
    action = jnp.clip(batch["action"].reshape(out.shape).astype(jnp.float32), low, high)
    return jnp.sum(jnp.square(squash(out, low, high) - action), axis=-1)


def make_update(networks: BCNetworks, config: BCConfig) -> UpdateFn:
    """The learner's update: ``sgd_steps_per_update`` scanned SGD steps on ``[batch, k, ...]``."""
    optimizer = make_optimizer(config)

    def sgd_step(state: TrainingState, batch: Batch) -> tuple[TrainingState, dict[str, jax.Array], jax.Array]:
        def loss_fn(params: optax.Params) -> jax.Array:
            return jnp.mean(bc_loss(networks, params, batch))

        loss, grads = jax.value_and_grad(loss_fn)(state.params)
        grads = jax.lax.pmean(grads, AXIS_NAME)  # all-reduce: every device applies the same update
        updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        metrics = {"loss": jax.lax.pmean(loss, AXIS_NAME)}
        return TrainingState(params, opt_state, state.steps + 1), metrics, jnp.zeros_like(batch["reward"])

    return scan_sgd_steps(sgd_step, unroll=getattr(networks.network, "has_convolutions", False))


def make_policy(networks: BCNetworks) -> Policy:
    """The cloned policy: the most likely action (discrete, among the allowed ones) or ``mu(s)``."""

    def policy(
        params: optax.Params, key: jax.Array, observation: Pytree, info: ActorInfo
    ) -> tuple[jax.Array, dict[str, Any], jax.Array]:
        out = apply_network(networks.network, params, _as_float(observation))
        if networks.num_actions is not None:
            return jnp.argmax(mask_logits(out, action_mask(observation)), axis=-1).astype(jnp.int32), {}, key
        return squash(out, *_bounds(networks)), {}, key

    return Policy(policy)
