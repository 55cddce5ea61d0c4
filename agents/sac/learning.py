"""SAC's update and policies, written top to bottom (Haarnoja et al., 2018, with automatic
entropy tuning).

On a batch of n-step transitions ``(s, a, R, d, s')`` (``d`` the bootstrap discount, 0 after a
termination; see ``shoal.replay.adders``), one SGD step updates, each with its own Adam:

* the twin critics, towards ``y = R + d * (min_i Q_target_i(s', a') - alpha * log pi(a'|s'))``
  with ``a' ~ pi(.|s')``:  ``L_Q = mean_i mean((Q_i(s, a) - y)^2) / 2``;
* the policy, through a reparameterized ``a~ ~ pi(.|s)``:
  ``L_pi = mean(alpha * log pi(a~|s) - min_i Q_i(s, a~))``;
* the temperature: ``L_alpha = -mean(log alpha * (log pi(a~|s) + target_entropy))``;

then moves the target critics by Polyak averaging, ``target <- tau * online + (1 - tau) * target``.
Gradients are averaged over devices (``pmean``); the Gaussian noise of each example is drawn
from a key of its own global row, so an update does not depend on how rows are spread over
devices. One learner update is ``sgd_steps_per_update`` such steps in one ``lax.scan``.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from shoal.agents.blocks.dict_observations import example_observation
from shoal.agents.sac.config import SACConfig
from shoal.agents.sac.networks import SACNetworks, sample_action, squash
from shoal.core.types import ActorInfo, Policy
from shoal.learners.updates import AXIS_NAME, UpdateFn, global_row_keys, scan_sgd_steps


class TrainingState(NamedTuple):
    params: optax.Params  # the policy's: what actors pull
    critic_params: optax.Params
    target_critic_params: optax.Params
    log_alpha: jax.Array
    policy_opt_state: optax.OptState
    critic_opt_state: optax.OptState
    alpha_opt_state: optax.OptState
    key: jax.Array


def _rows(observation) -> int:
    """The batch size of a batch of observations (an array, or a dict of arrays)."""
    return jax.tree_util.tree_leaves(observation)[0].shape[0]


def init_state(key: jax.Array, networks: SACNetworks, config: SACConfig) -> TrainingState:
    @jax.jit  # one compiled computation, not dozens of eagerly dispatched ones
    def init(key):
        policy_key, critic_key, key = jax.random.split(key, 3)
        observation = example_observation(networks.observation_shape)
        action = jnp.zeros((1, networks.action_size), jnp.float32)
        params = networks.policy.init(policy_key, observation)
        critic_params = networks.critic.init(critic_key, observation, action)
        log_alpha = jnp.log(jnp.asarray(config.initial_temperature, jnp.float32))
        adam = optax.adam(config.learning_rate)
        return TrainingState(params, critic_params, critic_params, log_alpha, adam.init(params),
                             adam.init(critic_params), adam.init(log_alpha), key)

    return init(key)


def make_update(networks: SACNetworks, config: SACConfig) -> UpdateFn:
    adam = optax.adam(config.learning_rate)
    target_entropy = (-float(networks.action_size) if config.target_entropy is None
                      else config.target_entropy)

    def sample(params, observation, key):
        noise = jax.vmap(lambda k: jax.random.normal(k, (networks.action_size,)))(
            global_row_keys(key, _rows(observation)))
        return sample_action(networks, params, observation, noise)

    def critic_loss(critic_params, state: TrainingState, batch, key):
        next_action, next_log_prob = sample(state.params, batch["next_observation"], key)
        q1_next, q2_next = networks.critic.apply(state.target_critic_params,
                                                 batch["next_observation"], next_action)
        alpha = jnp.exp(state.log_alpha)
        target = jax.lax.stop_gradient(batch["reward"] + batch["discount"] * (
            jnp.minimum(q1_next, q2_next) - alpha * next_log_prob))
        q1, q2 = networks.critic.apply(critic_params, batch["observation"], batch["action"])
        loss = 0.5 * (jnp.mean(jnp.square(q1 - target)) + jnp.mean(jnp.square(q2 - target)))
        return loss, jnp.mean(q1)

    def policy_loss(params, critic_params, log_alpha, observation, key):
        action, log_prob = sample(params, observation, key)
        q1, q2 = networks.critic.apply(critic_params, observation, action)
        loss = jnp.mean(jnp.exp(log_alpha) * log_prob - jnp.minimum(q1, q2))
        return loss, log_prob

    def alpha_loss(log_alpha, log_prob):
        return -jnp.mean(log_alpha * jax.lax.stop_gradient(log_prob + target_entropy))

    def apply(grads, opt_state, params):
        updates, opt_state = adam.update(jax.lax.pmean(grads, AXIS_NAME), opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    def sgd_step(state: TrainingState, batch):
        key, critic_key, policy_key = jax.random.split(state.key, 3)
        (q_loss, q_mean), grads = jax.value_and_grad(critic_loss, has_aux=True)(
            state.critic_params, state, batch, critic_key)
        critic_params, critic_opt_state = apply(grads, state.critic_opt_state, state.critic_params)
        (pi_loss, log_prob), grads = jax.value_and_grad(policy_loss, has_aux=True)(
            state.params, state.critic_params, state.log_alpha, batch["observation"], policy_key)
        params, policy_opt_state = apply(grads, state.policy_opt_state, state.params)
        a_loss, grads = jax.value_and_grad(alpha_loss)(state.log_alpha, log_prob)
        log_alpha, alpha_opt_state = apply(grads, state.alpha_opt_state, state.log_alpha)
        target_critic_params = optax.incremental_update(critic_params, state.target_critic_params,
                                                        config.tau)
        metrics = jax.lax.pmean({"critic_loss": q_loss, "policy_loss": pi_loss, "alpha_loss": a_loss,
                                 "alpha": jnp.exp(log_alpha), "entropy": -jnp.mean(log_prob),
                                 "q_mean": q_mean}, AXIS_NAME)
        return TrainingState(params, critic_params, target_critic_params, log_alpha, policy_opt_state,
                             critic_opt_state, alpha_opt_state, key), metrics, None

    return scan_sgd_steps(sgd_step)


def make_policy(networks: SACNetworks, evaluation: bool) -> Policy:
    """A sample of the tanh-Gaussian policy, or its squashed mean for evaluation."""

    def policy(params, key, observation, info: ActorInfo):
        if evaluation:
            return squash(networks, networks.policy.apply(params, observation)[0]), {}, key
        key, noise_key = jax.random.split(key)
        action, _ = sample_action(networks, params, observation,
                                  jax.random.normal(noise_key, (_rows(observation), networks.action_size)))
        return action, {}, key

    return Policy(policy)
