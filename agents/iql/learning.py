"""IQL's learning step and policy, written top to bottom (Kostrikov, Nair & Levine 2021, "Offline
Reinforcement Learning with Implicit Q-Learning").

For a batch of the dataset's single transitions ``(s, a, r, d, s')`` (``d = gamma * (1 -
terminated)``, the adder's bootstrap discount; a truncated episode bootstraps), one SGD step
updates, each with its own Adam (gradients clipped by ``max_gradient_norm``):

* the value, by expectile regression on the target critics' value of the data's action::

      u    = min(Q1_target(s, a), Q2_target(s, a)) - V(s)
      L_V  = mean_i |expectile - 1(u_i < 0)| * u_i^2

  (``expectile`` 0.5: the mean; towards 1: the best action the data holds, never an unseen one);
* the critics, by TD to the value of the next state (no action of the policy is ever asked)::

      y    = r + d * V(s')
      L_Q  = mean_i  sum_{j=1,2} (Q_j(s_i, a_i) - y_i)^2 / 2

* the policy, by advantage-weighted regression onto the data's actions::

      w    = min(exp(beta * (min_j Q_j_target(s, a) - V(s))), max_weight)
      L_pi = -mean_i  w_i * log pi(a_i | s_i)

  discrete: ``pi = softmax`` of BC's logits (over the allowed actions, with action masks);
  continuous: the paper's Gaussian ``N(a; mu(s), exp(log_std))`` with BC's mean ``mu(s)``
  squashed into the Box and a state-independent ``log_std`` (clipped to [-5, 2]);

then moves the target critics by Polyak averaging, ``target <- tau * online + (1 - tau) *
target``. ``V`` and the target critics are held fixed (``stop_gradient``) where another loss reads
them, so one gradient of ``L_V + L_Q + L_pi`` is the three gradients above. Gradients are
averaged over devices (``pmean``); one learner update is ``sgd_steps_per_update`` such steps in
one ``lax.scan``. The policy acts greedily: ``argmax`` of the logits, or ``mu(s)`` (BC's policy).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from shoal.agents.bc import learning as bc_learning
from shoal.agents.bc.learning import squash
from shoal.agents.components.dict_observations import action_mask, example_observation, mask_logits
from shoal.agents.components.distributions import categorical_log_prob, gaussian_log_prob
from shoal.agents.components.flax_apply import apply_network
from shoal.agents.iql.config import IQLConfig
from shoal.agents.iql.networks import IQLNetworks, critic_values, init_critic, value
from shoal.core.types import ActorInfo, Batch, Params, Policy, Pytree
from shoal.learners.updates import AXIS_NAME, UpdateFn, scan_sgd_steps

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0  # (the continuous policy's log standard deviation)


class TrainingState(NamedTuple):
    params: optax.Params  # the policy's, ``{"network"}`` (and ``"log_std"``, continuous): what evaluation pulls
    value_params: optax.Params
    critic_params: optax.Params
    target_critic_params: optax.Params
    policy_opt_state: optax.OptState
    value_opt_state: optax.OptState
    critic_opt_state: optax.OptState
    steps: jax.Array


def make_optimizer(config: IQLConfig) -> optax.GradientTransformation:
    return optax.chain(optax.clip_by_global_norm(config.max_gradient_norm), optax.adam(config.learning_rate))


def _as_float(observation: Pytree) -> Pytree:
    return jax.tree_util.tree_map(lambda x: x.astype(jnp.float32), observation)


def _action_size(networks: IQLNetworks) -> int:
    low = networks.policy.low
    return 1 if low is None else int(low.shape[0])


def init_state(key: jax.Array, networks: IQLNetworks, config: IQLConfig) -> TrainingState:
    @jax.jit  # one compiled computation
    def init(key: jax.Array) -> TrainingState:
        policy_key, value_key, critic_key = jax.random.split(key, 3)
        observation = _as_float(example_observation(networks.observation_shape))
        action = jnp.zeros((1, _action_size(networks)), jnp.float32)
        params: dict[str, Any] = {"network": networks.policy.network.init(policy_key, observation)}
        if not networks.discrete:
            params["log_std"] = jnp.zeros((_action_size(networks),), jnp.float32)
        value_params = networks.value.init(value_key, observation)
        critic_params = init_critic(networks, critic_key, observation, action)
        optimizer = make_optimizer(config)
        return TrainingState(
            params,
            value_params,
            critic_params,
            critic_params,
            optimizer.init(params),
            optimizer.init(value_params),
            optimizer.init(critic_params),
            jnp.zeros((), jnp.int32),
        )

    return init(key)


def expectile_loss(u: jax.Array, expectile: float) -> jax.Array:
    """``|expectile - 1(u < 0)| * u^2``, elementwise (the value's loss of the module docstring)."""
    return jnp.abs(expectile - (u < 0).astype(u.dtype)) * jnp.square(u)


def awr_weights(advantage: jax.Array, beta: float, max_weight: float) -> jax.Array:
    """``min(exp(beta * advantage), max_weight)``, computed without overflow."""
    return jnp.exp(jnp.minimum(beta * advantage, np.log(max_weight)))


def log_prob(networks: IQLNetworks, params: Params, observation: Pytree, action: jax.Array) -> jax.Array:
    """``log pi(a | s)`` of the data's actions (module docstring), ``[batch]``."""
    out = apply_network(networks.policy.network, params["network"], observation)
    if networks.discrete:
        return categorical_log_prob(mask_logits(out, action_mask(observation)), action)
    low, high = networks.policy.low, networks.policy.high
    assert low is not None and high is not None  # (continuous)
    mean = squash(out, low, high)
    log_std = jnp.clip(params["log_std"], LOG_STD_MIN, LOG_STD_MAX)
    return gaussian_log_prob(mean, log_std, jnp.clip(action.reshape(out.shape).astype(jnp.float32), low, high))


def iql_loss(
    networks: IQLNetworks,
    trained: dict[str, Params],
    target_critic_params: Params,
    batch: Batch,
    config: IQLConfig,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """``L_V + L_Q + L_pi`` on one device's batch (module docstring) and its metrics; each term
    reaches only its own params (``trained``: ``{"policy", "value", "critic"}``)."""
    observation, next_observation = _as_float(batch["observation"]), _as_float(batch["next_observation"])
    action = batch["action"]
    target_q = jax.lax.stop_gradient(jnp.minimum(*critic_values(networks, target_critic_params, observation, action)))

    v = value(networks, trained["value"], observation)
    value_loss = jnp.mean(expectile_loss(target_q - v, config.expectile))

    y = jax.lax.stop_gradient(batch["reward"] + batch["discount"] * value(networks, trained["value"], next_observation))
    q1, q2 = critic_values(networks, trained["critic"], observation, action)
    critic_loss = 0.5 * (jnp.mean(jnp.square(q1 - y)) + jnp.mean(jnp.square(q2 - y)))

    advantage = jax.lax.stop_gradient(target_q - v)
    weights = awr_weights(advantage, config.beta, config.max_weight)
    policy_loss = -jnp.mean(weights * log_prob(networks, trained["policy"], observation, action))

    return value_loss + critic_loss + policy_loss, {
        "value_loss": value_loss,
        "critic_loss": critic_loss,
        "policy_loss": policy_loss,
        "v_mean": jnp.mean(v),
        "q_mean": jnp.mean(q1),
        "advantage_mean": jnp.mean(advantage),
        "weight_mean": jnp.mean(weights),
    }


def make_update(networks: IQLNetworks, config: IQLConfig) -> UpdateFn:
    """The learner's update: ``sgd_steps_per_update`` scanned SGD steps on ``[batch, k, ...]``."""
    optimizer = make_optimizer(config)

    def apply(grads: Params, opt_state: optax.OptState, params: Params) -> tuple[Params, optax.OptState]:
        updates, opt_state = optimizer.update(jax.lax.pmean(grads, AXIS_NAME), opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    def sgd_step(state: TrainingState, batch: Batch) -> tuple[TrainingState, dict[str, jax.Array], None]:
        trained = {"policy": state.params, "value": state.value_params, "critic": state.critic_params}
        grads, metrics = jax.grad(
            lambda p: iql_loss(networks, p, state.target_critic_params, batch, config), has_aux=True
        )(trained)
        params, policy_opt_state = apply(grads["policy"], state.policy_opt_state, state.params)
        value_params, value_opt_state = apply(grads["value"], state.value_opt_state, state.value_params)
        critic_params, critic_opt_state = apply(grads["critic"], state.critic_opt_state, state.critic_params)
        target_critic_params = optax.incremental_update(critic_params, state.target_critic_params, config.tau)
        new_state = TrainingState(
            params,
            value_params,
            critic_params,
            target_critic_params,
            policy_opt_state,
            value_opt_state,
            critic_opt_state,
            state.steps + 1,
        )
        return new_state, jax.lax.pmean(metrics, AXIS_NAME), None

    return scan_sgd_steps(sgd_step, unroll=getattr(networks.policy.network, "has_convolutions", False))


def make_policy(networks: IQLNetworks) -> Policy:
    """The greedy policy: BC's (``argmax`` of the logits among the allowed actions, or ``mu(s)``)."""
    greedy = bc_learning.make_policy(networks.policy)

    def policy(
        params: Params, key: jax.Array, observation: Pytree, info: ActorInfo
    ) -> tuple[jax.Array, dict[str, Any], jax.Array]:
        return greedy.apply(params["network"], key, observation, info)

    return Policy(policy)
