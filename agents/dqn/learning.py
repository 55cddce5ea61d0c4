"""DQN's learning step and policies, written top to bottom.

Loss for a batch of n-step transitions ``(s, a, R, d, s')`` (``R`` the n-step return, ``d`` the
bootstrap discount, 0 after termination -- see ``shoal.replay.adders``):

    a*     = argmax_a' Q(s', a'; online)                      # double Q: online net chooses
    y      = R + d * Q(s', a*; target)                        # target net evaluates
    loss   = mean_i  w_i * huber(Q(s_i, a_i; online) - y_i)

or, with ``double_q=False``, the Nature and MinAtar papers' ``y = R + d * max_a' Q(s', a'; target)``,

with ``w_i = 1`` for uniform replay, or importance weights ``(N P(i))^-beta / max_j(...)`` for
prioritized replay. Gradients are averaged over devices (``pmean``), clipped, and applied with
Adam; every ``target_update_period`` steps the target params are set to the online ones. One
learner update is ``sgd_steps_per_update`` such steps in one ``lax.scan``.

The loss is a seam (as Acme's ``loss_fn``): ``make_update(network, config, loss)`` takes any
``Loss`` -- per-transition losses, ``|TD|`` for the priorities and ``Q(s, a)`` for the metrics --
and keeps the rest (importance weights, the optimizer, the target network, the scan). A DQN
variant (QR-DQN in ``examples/qrdqn_agent.py``) is a builder whose ``loss`` method returns
another one.

With action masks (``shoal.agents.components.dict_observations``: the ``action_mask`` stored with ``s'``), the
argmax is over the actions allowed in ``s'``; the policy's greedy and random actions are
allowed ones too (a random action is uniform over the allowed set).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from shoal.agents.components.dict_observations import MASKED_LOGIT, action_mask, example_observation, mask_logits
from shoal.agents.components.flax_apply import apply_network
from shoal.agents.dqn.config import DQNConfig, check_optimizer
from shoal.agents.dqn.networks import QNetwork
from shoal.core.types import ActorInfo, Batch, Policy, Pytree
from shoal.learners.updates import AXIS_NAME, UpdateFn, scan_sgd_steps


class TrainingState(NamedTuple):
    params: optax.Params
    target_params: optax.Params
    opt_state: optax.OptState
    steps: jax.Array


def make_optimizer(config: DQNConfig) -> optax.GradientTransformation:
    """The gradient clipped at ``max_gradient_norm``, then Adam or centred RMSProp (``config.optimizer``)."""
    check_optimizer(config)  # (a name it does not know is never Adam by default)
    if config.optimizer == "rmsprop":  # PyTorch's RMSprop(alpha=0.95, eps=0.01, centered=True)
        step = optax.rmsprop(config.learning_rate, decay=0.95, eps=0.01, centered=True, eps_in_sqrt=False)
    else:
        step = optax.adam(config.learning_rate)
    return optax.chain(optax.clip_by_global_norm(config.max_gradient_norm), step)


def init_state(
    key: jax.Array,
    network: QNetwork,
    observation_shape: tuple[int, ...] | dict[str, tuple[int, ...]],
    config: DQNConfig,
) -> TrainingState:
    @jax.jit  # one compiled computation, not dozens of eagerly dispatched ones
    def init(key: jax.Array) -> TrainingState:
        params = network.init(key, example_observation(observation_shape))
        return TrainingState(params, params, make_optimizer(config).init(params), jnp.zeros((), jnp.int32))

    return init(key)


def double_q_bootstrap(q_t_online: jax.Array, q_t_target: jax.Array, mask: jax.Array | None) -> jax.Array:
    """``Q(s', a*; target)`` with ``a* = argmax_a' Q(s', a'; online)`` over the actions ``mask``
    allows in ``s'`` (all, if ``None``), per transition ``[batch]``."""
    best_next = jnp.argmax(mask_logits(q_t_online, mask), axis=-1)
    return jnp.take_along_axis(q_t_target, best_next[:, None], axis=-1)[:, 0]


def max_q_bootstrap(q_t_target: jax.Array, mask: jax.Array | None) -> jax.Array:
    """``max_a' Q(s', a'; target)`` over the actions ``mask`` allows in ``s'`` (all, if
    ``None``), per transition ``[batch]``: the target without double Q. (Read at the argmax, as
    ``double_q_bootstrap`` is: a state with no allowed action reads a Q value, not the mask's.)"""
    return double_q_bootstrap(q_t_target, q_t_target, mask)  # (the target net chooses as well)


class LossOutput(NamedTuple):
    """A DQN loss's output, per transition of one device's batch ``[batch]``."""

    losses: jax.Array  # the loss of each transition (``make_update`` applies importance weights)
    td_abs: jax.Array  # |TD| of each transition: its new priority under prioritized replay
    q: jax.Array  # Q(s, a) of the taken actions (the ``q_mean`` metric)


# ``loss(network, params, target_params, batch) -> LossOutput``; ``batch`` holds ``observation``,
# ``action``, ``reward`` (n-step), ``discount`` (bootstrap) and ``next_observation``.
Loss = Callable[[Any, optax.Params, optax.Params, dict], LossOutput]


def double_q_td(
    network: QNetwork, params: optax.Params, target_params: optax.Params, batch: Batch, double_q: bool = True
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``(Q(s, .; online), Q(s, a; online), td)`` per transition, ``td = Q(s, a) - y`` with the
    target ``y`` of the module docstring (no gradient through ``y``): double Q, or the target
    net's max with ``double_q=False``."""
    q_t_target = apply_network(network, target_params, batch["next_observation"])
    mask = action_mask(batch["next_observation"])
    if double_q:
        batch_size = batch["reward"].shape[0]
        # One pass of the online net over s and s' together (half the dispatches of two).
        both = jax.tree_util.tree_map(
            lambda s, s_next: jnp.concatenate([s, s_next]), batch["observation"], batch["next_observation"]
        )
        q_online = apply_network(network, params, both)
        q_tm1, q_t_online = q_online[:batch_size], q_online[batch_size:]
        bootstrap = double_q_bootstrap(q_t_online, q_t_target, mask)
    else:  # (the online net reads s alone)
        q_tm1 = apply_network(network, params, batch["observation"])
        bootstrap = max_q_bootstrap(q_t_target, mask)
    target = jax.lax.stop_gradient(batch["reward"] + batch["discount"] * bootstrap)
    q_taken = jnp.take_along_axis(q_tm1, batch["action"][:, None].astype(jnp.int32), axis=-1)[:, 0]
    return q_tm1, q_taken, q_taken - target


def double_q_loss(
    network: QNetwork,
    params: optax.Params,
    target_params: optax.Params,
    batch: Batch,
    huber_delta: float,
    double_q: bool = True,
) -> LossOutput:
    """DQN's loss (module docstring): ``huber(Q(s, a; online) - y)`` with the double-Q target
    (the target net's max with ``double_q=False``)."""
    _, q_taken, td = double_q_td(network, params, target_params, batch, double_q)
    return LossOutput(optax.huber_loss(td, delta=huber_delta), jnp.abs(td), q_taken)


def make_update(network: QNetwork, config: DQNConfig, loss: Loss | None = None) -> UpdateFn:
    """The learner's update: ``sgd_steps_per_update`` scanned SGD steps on ``[batch, k, ...]``
    of ``loss`` (``double_q_loss`` if ``None``); ``aux`` is ``|TD|`` per transition (for
    priority updates)."""
    optimizer = make_optimizer(config)
    if loss is None:

        def loss(network: Any, params: optax.Params, target_params: optax.Params, batch: Batch) -> LossOutput:
            return double_q_loss(network, params, target_params, batch, config.huber_delta, config.double_q)

    def loss_fn(
        params: optax.Params,
        target_params: optax.Params,
        batch: Batch,
    ) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
        out = loss(network, params, target_params, batch)
        losses = out.losses
        if config.prioritized_replay:
            weights = (batch["table_size"] * batch["probability"]) ** -config.importance_sampling_exponent
            weights = weights / jax.lax.pmax(jnp.max(weights), AXIS_NAME)
            losses = losses * weights
        return jnp.mean(losses), (out.td_abs, out.q)

    def sgd_step(state: TrainingState, batch: Batch) -> tuple[TrainingState, dict[str, jax.Array], jax.Array]:
        (mean_loss, (td_abs, q)), grads = jax.value_and_grad(loss_fn, has_aux=True)(
            state.params, state.target_params, batch
        )
        grads = jax.lax.pmean(grads, AXIS_NAME)  # all-reduce: every device applies the same update
        updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        steps = state.steps + 1
        target_params = optax.periodic_update(params, state.target_params, steps, config.target_update_period)
        metrics = {"loss": jax.lax.pmean(mean_loss, AXIS_NAME), "q_mean": jax.lax.pmean(jnp.mean(q), AXIS_NAME)}
        return TrainingState(params, target_params, opt_state, steps), metrics, td_abs

    return scan_sgd_steps(sgd_step, unroll=getattr(network, "has_convolutions", False))  # (convolutions: see _loop)


def epsilon_at(env_step: jax.Array, config: DQNConfig) -> jax.Array:
    """Linear decay from ``epsilon_start`` to ``epsilon_end`` over ``epsilon_decay_steps``."""
    fraction = jnp.clip(env_step / max(config.epsilon_decay_steps, 1), 0.0, 1.0)
    return config.epsilon_start + fraction * (config.epsilon_end - config.epsilon_start)


def make_policy(network: QNetwork, num_actions: int, config: DQNConfig, evaluation: bool) -> Policy:
    """Epsilon-greedy over Q values, for a batch of observations, in one jittable function
    (the evaluation policy with ``eval_epsilon`` 0 draws no random numbers: ``shoal export``)."""

    def policy(
        params: optax.Params,
        key: jax.Array,
        observation: Pytree,
        info: ActorInfo,
    ) -> tuple[jax.Array, dict[str, jax.Array], jax.Array]:
        mask = action_mask(observation)
        q = apply_network(network, params, jax.tree_util.tree_map(lambda x: x.astype(jnp.float32), observation))
        greedy = jnp.argmax(mask_logits(q, mask), axis=-1).astype(jnp.int32)
        if evaluation and config.eval_epsilon == 0:
            return greedy, {}, key
        epsilon = config.eval_epsilon if evaluation else epsilon_at(info.env_steps, config)
        key, explore_key, action_key = jax.random.split(key, 3)
        if mask is None:
            random_actions = jax.random.randint(action_key, greedy.shape, 0, num_actions, jnp.int32)
        else:  # uniform over the allowed actions
            random_actions = jax.random.categorical(action_key, jnp.where(mask, 0.0, MASKED_LOGIT)).astype(jnp.int32)
        explore = jax.random.uniform(explore_key, greedy.shape) < epsilon
        return jnp.where(explore, random_actions, greedy), {}, key

    return Policy(policy)
