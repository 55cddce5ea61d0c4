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

The losses are a seam (as DQN's): ``make_update(networks, config, loss)`` takes any ``Loss`` -- a
plain function of the params (policy, critics, temperature), the target critics, a batch, a key
and the config, returning one loss (the three summed, each reaching only its own params) and
its metrics -- and keeps the state, the three Adams, the Polyak target and the scan; a SAC
variant is a config subclass and a builder whose ``loss`` is another one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from shoal.agents.components.dict_observations import example_observation
from shoal.agents.components.flax_apply import apply_network
from shoal.agents.sac.config import SACConfig
from shoal.agents.sac.networks import SACNetworks, sample_action, squash
from shoal.core.types import ActorInfo, Batch, Params, Policy, Pytree
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


def _rows(observation: Pytree) -> int:
    """The batch size of a batch of observations (an array, or a dict of arrays)."""
    return jax.tree_util.tree_leaves(observation)[0].shape[0]


def init_state(key: jax.Array, networks: SACNetworks, config: SACConfig) -> TrainingState:
    @jax.jit  # one compiled computation, not dozens of eagerly dispatched ones
    def init(key: jax.Array) -> TrainingState:
        policy_key, critic_key, key = jax.random.split(key, 3)
        observation = example_observation(networks.observation_shape)
        action = jnp.zeros((1, networks.action_size), jnp.float32)
        params = networks.policy.init(policy_key, observation)
        critic_params = networks.critic.init(critic_key, observation, action)
        log_alpha = jnp.log(jnp.asarray(config.initial_temperature, jnp.float32))
        adam = optax.adam(config.learning_rate)
        return TrainingState(
            params,
            critic_params,
            critic_params,
            log_alpha,
            adam.init(params),
            adam.init(critic_params),
            adam.init(log_alpha),
            key,
        )

    return init(key)


def target_entropy(networks: SACNetworks, config: SACConfig) -> float:
    """The entropy the temperature is tuned towards: ``target_entropy``, or ``-action_dimensions``."""
    return -float(networks.action_size) if config.target_entropy is None else config.target_entropy


def sample(networks: SACNetworks, params: Params, observation: Pytree, key: jax.Array) -> tuple[jax.Array, jax.Array]:
    """A reparameterized action of the policy and its log-probability for each observation, the
    noise of each row drawn from a key of its own global row."""
    noise = jax.vmap(lambda k: jax.random.normal(k, (networks.action_size,)))(global_row_keys(key, _rows(observation)))
    return sample_action(networks, params, observation, noise)


def sac_loss(
    networks: SACNetworks,
    params: dict,
    target_critic_params: optax.Params,
    batch: dict,
    rng: jax.Array,
    config: SACConfig,
) -> tuple[jax.Array, dict]:
    """SAC's three losses on one device's batch (module docstring), summed: each reaches only its
    own params (the others are held fixed by ``stop_gradient``), so one gradient of the sum is
    the three gradients of the module docstring."""
    _, critic_key, policy_key = jax.random.split(rng, 3)  # (the update carries the first one forward)
    policy, critic, log_alpha = params["policy"], params["critic"], params["log_alpha"]
    alpha = jnp.exp(jax.lax.stop_gradient(log_alpha))

    # the critics, towards y = R + d * (min_i Q_target_i(s', a') - alpha * log pi(a'|s'))
    next_action, next_log_prob = sample(networks, policy, batch["next_observation"], critic_key)
    q1_next, q2_next = apply_network(networks.critic, target_critic_params, batch["next_observation"], next_action)
    target = jax.lax.stop_gradient(
        batch["reward"] + batch["discount"] * (jnp.minimum(q1_next, q2_next) - alpha * next_log_prob)
    )
    q1, q2 = apply_network(networks.critic, critic, batch["observation"], batch["action"])
    critic_loss = 0.5 * (jnp.mean(jnp.square(q1 - target)) + jnp.mean(jnp.square(q2 - target)))

    # the policy, through a reparameterized a~ ~ pi(.|s), against the critics held fixed
    action, log_prob = sample(networks, policy, batch["observation"], policy_key)
    q1_pi, q2_pi = apply_network(networks.critic, jax.lax.stop_gradient(critic), batch["observation"], action)
    policy_loss = jnp.mean(alpha * log_prob - jnp.minimum(q1_pi, q2_pi))

    # the temperature, towards the target entropy
    alpha_loss = -jnp.mean(log_alpha * jax.lax.stop_gradient(log_prob + target_entropy(networks, config)))

    loss = critic_loss + policy_loss + alpha_loss
    return loss, {
        "critic_loss": critic_loss,
        "policy_loss": policy_loss,
        "alpha_loss": alpha_loss,
        "entropy": -jnp.mean(log_prob),
        "q_mean": jnp.mean(q1),
    }


# The loss seam (as DQN's, ``shoal.agents.dqn.learning.Loss``): a SAC variant is a config subclass
# and a function of this shape; ``make_update`` keeps the state, the three Adams, the Polyak target
# and the scan over devices. ``loss(networks, params, target_critic_params, batch, rng, config) ->
# (loss, metrics)``: ``params`` ``{"policy", "critic", "log_alpha"}``, each updated by the gradient
# of ``loss`` with respect to it; ``batch`` one device's n-step transitions (``observation``,
# ``action``, ``reward``, ``discount``, ``next_observation``); ``rng`` this SGD step's key (the
# same on every device: ``global_row_keys`` gives per-row keys); ``metrics`` scalars.
Loss = Callable[[SACNetworks, dict, optax.Params, dict, jax.Array, SACConfig], tuple[jax.Array, dict]]


def make_update(networks: SACNetworks, config: SACConfig, loss: Loss = sac_loss) -> UpdateFn:
    """``sgd_steps_per_update`` scanned SGD steps on ``loss`` over ``[batch, k, ...]`` (module
    docstring): each of the policy, the critics and the temperature takes an Adam step along the
    gradient of ``loss`` with respect to it."""
    adam = optax.adam(config.learning_rate)

    def apply(grads: Params, opt_state: optax.OptState, params: Params) -> tuple[Params, optax.OptState]:
        updates, opt_state = adam.update(jax.lax.pmean(grads, AXIS_NAME), opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    def sgd_step(state: TrainingState, batch: Batch) -> tuple[TrainingState, dict[str, jax.Array], None]:
        key = jax.random.split(state.key, 3)[0]  # the next step's (``sac_loss`` draws from the others)
        trained = {"policy": state.params, "critic": state.critic_params, "log_alpha": state.log_alpha}
        grads, metrics = jax.grad(
            lambda params: loss(networks, params, state.target_critic_params, batch, state.key, config), has_aux=True
        )(trained)
        critic_params, critic_opt_state = apply(grads["critic"], state.critic_opt_state, state.critic_params)
        params, policy_opt_state = apply(grads["policy"], state.policy_opt_state, state.params)
        log_alpha, alpha_opt_state = apply(grads["log_alpha"], state.alpha_opt_state, state.log_alpha)
        target_critic_params = optax.incremental_update(critic_params, state.target_critic_params, config.tau)
        metrics = jax.lax.pmean({**metrics, "alpha": jnp.exp(log_alpha)}, AXIS_NAME)
        return (
            TrainingState(
                params,
                critic_params,
                target_critic_params,
                log_alpha,
                policy_opt_state,
                critic_opt_state,
                alpha_opt_state,
                key,
            ),
            metrics,
            None,
        )

    return scan_sgd_steps(sgd_step)


def make_policy(networks: SACNetworks, evaluation: bool) -> Policy:
    """A sample of the tanh-Gaussian policy, or its squashed mean for evaluation."""

    def policy(
        params: Params,
        key: jax.Array,
        observation: Pytree,
        info: ActorInfo,
    ) -> tuple[jax.Array, dict[str, jax.Array], jax.Array]:
        if evaluation:
            return squash(networks, apply_network(networks.policy, params, observation)[0]), {}, key
        key, noise_key = jax.random.split(key)
        action, _ = sample_action(
            networks, params, observation, jax.random.normal(noise_key, (_rows(observation), networks.action_size))
        )
        return action, {}, key

    return Policy(policy)
