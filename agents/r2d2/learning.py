"""R2D2's update and policies, written top to bottom (Kapturowski et al., 2019).

A batch holds ``B`` env sequences of ``burn_in + T`` steps (``shoal.replay.EnvSequenceAdder``),
each with the LSTM state the actor acted from at its first step (``core_state``) and the
probability it was sampled with. Sequences run across episode ends: every unroll resets the
state to zeros where an episode began (``shoal.agents.components.recurrent``). On each device's sequences:

1. burn-in: the online and the target network unroll the first ``burn_in`` steps from the
   stored state; the state the online network reaches is cut from the gradient. These steps
   carry no loss.
2. both unroll the other ``T`` steps from there: ``Q(o_t, .)`` online and target, and the
   value of each step's next observation ``o'_t`` (the final one where the episode ended), one
   more LSTM step from the state after step ``t``;
3. the double-Q bootstrap, in the rescaled space (``shoal.agents.components.value_rescaling``)::

       b_t = h^-1(Q_target(o'_t, a*)),   a* = argmax_a Q_online(o'_t, a)   (over allowed actions)

4. the n-step target, with ``m = min(n, T - t, steps to the episode's end inclusive)``::

       G_t = sum_{k<m} gamma^k r_{t+k} + gamma^m (1 - terminated_{t+m-1}) b_{t+m-1}
       y_t = h(G_t)

   so a termination does not bootstrap, a truncation bootstraps from its final observation,
   and the last steps of a sequence use fewer rewards (as rlax's n-step returns);
5. the loss, with ``delta_t = Q_online(o_t, a_t) - y_t`` (no gradient through ``y``)::

       L = mean_i w_i mean_t delta_{i,t}^2 / 2,   w_i = P(i)^-beta / max_j P(j)^-beta

   (``beta`` the importance-sampling exponent, the max over the global batch); gradients are
   averaged over devices, clipped by global norm, applied with Adam;
6. each sequence's new priority ``eta max_t |delta_t| + (1 - eta) mean_t |delta_t|``, which
   the learner writes back to the table;
7. every ``target_update_period`` SGD steps the target params become the online ones.

Acting is epsilon-greedy on the online Q, each env with its own epsilon per episode (Ape-X's
``0.4 ** (1 + 7 i / 255)``, drawn when the episode starts: the policy's state holds it beside
the LSTM's).

The loss is a seam (as DQN's): ``make_update(networks, config, loss)`` takes any ``Loss`` -- a
plain function of the params, the target params, a batch, a key and the config, returning each
sequence's loss, ``|delta_t|`` and ``Q(o_t, a_t)`` -- and keeps the rest (the importance weights,
the optimizer, the target network, the priorities); an R2D2 variant is a config subclass and a
builder whose ``loss`` is another one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from shoal.agents.components import recurrent
from shoal.agents.components.dict_observations import MASKED_LOGIT, action_mask, mask_logits
from shoal.agents.components.flax_apply import apply_network
from shoal.agents.components.recurrent import STATE_KEY
from shoal.agents.components.value_rescaling import rescale, unrescale
from shoal.agents.r2d2.config import R2D2Config
from shoal.agents.r2d2.networks import R2D2Networks
from shoal.core.specs import ArraySpec
from shoal.core.types import ActorInfo, Batch, Policy, Pytree
from shoal.learners.updates import AXIS_NAME, UpdateFn, UpdateOutput

NUM_EPSILONS = 256


class TrainingState(NamedTuple):
    params: optax.Params
    target_params: optax.Params
    opt_state: optax.OptState
    steps: jax.Array


def make_optimizer(config: R2D2Config) -> optax.GradientTransformation:
    return optax.chain(
        optax.clip_by_global_norm(config.max_gradient_norm), optax.adam(config.learning_rate, eps=config.adam_epsilon)
    )


def init_state(key: jax.Array, networks: R2D2Networks, config: R2D2Config) -> TrainingState:
    @jax.jit  # one compiled computation
    def init(key: jax.Array) -> TrainingState:
        params = recurrent.init_params(networks.network, key, networks.observation_shape)
        return TrainingState(params, params, make_optimizer(config).init(params), jnp.zeros((), jnp.int32))

    return init(key)


def n_step_targets(
    reward: jax.Array, terminated: jax.Array, truncated: jax.Array, bootstrap: jax.Array, discount: float, n: int
) -> jax.Array:
    """``G_t`` ``[B, T]`` of the module docstring (step 4), before rescaling; ``bootstrap[:, j]``
    is the value of step ``j``'s next observation."""
    length = reward.shape[1]
    shift = lambda x, k: jnp.concatenate([x[:, k:], jnp.zeros_like(x[:, :k])], axis=1)  # noqa: E731  x[:, t+k]
    ended = jnp.logical_or(terminated, truncated)
    ret = jnp.zeros_like(reward)
    scale = jnp.zeros_like(reward)  # gamma^m (1 - terminated_{t+m-1})
    value = jnp.zeros_like(reward)  # bootstrap_{t+m-1}
    alive = jnp.ones(reward.shape, bool)
    for k in range(n):
        live = alive & (jnp.arange(length) + k < length)
        ret = ret + jnp.where(live, discount**k * shift(reward, k), 0.0)
        scale = jnp.where(live, discount ** (k + 1) * (1.0 - shift(terminated, k)), scale)
        value = jnp.where(live, shift(bootstrap, k), value)
        alive = live & ~shift(ended, k)
    return ret + scale * value


def sequence_priorities(td_abs: jax.Array, eta: float) -> jax.Array:
    """``eta max_t |delta_t| + (1 - eta) mean_t |delta_t|`` per sequence (``td_abs`` ``[B, T]``)."""
    return eta * jnp.max(td_abs, axis=1) + (1.0 - eta) * jnp.mean(td_abs, axis=1)


def _as_network_input(observation: Any) -> Any:
    """Float32 arrays, frames left uint8 (the torso scales them)."""
    return jax.tree_util.tree_map(lambda x: x.astype(jnp.float32) if x.dtype != jnp.uint8 else x, observation)


def _observations(batch: dict) -> tuple[Any, Any]:
    return _as_network_input(batch["observation"]), _as_network_input(batch["next_observation"])


def _part(x: Any, start: int, stop: int | None = None) -> Any:
    """Steps ``start:stop`` of every sequence ``[B, T, ...]`` (of each array of a Dict too)."""
    return jax.tree_util.tree_map(lambda y: y[:, start:stop], x)


class LossOutput(NamedTuple):
    """An R2D2 loss's output, per sequence of one device's batch."""

    losses: jax.Array  # [B]: each sequence's loss (``make_update`` applies importance weights)
    td_abs: jax.Array  # [B, T]: |delta_t| of each trained step (the sequence's new priority)
    q: jax.Array  # [B, T]: Q(o_t, a_t) of each trained step (the ``q`` metric)


def r2d2_loss(
    networks: R2D2Networks,
    params: optax.Params,
    target_params: optax.Params,
    batch: dict,
    rng: jax.Array,
    config: R2D2Config,
) -> LossOutput:
    """R2D2's loss (module docstring, steps 1-5) per sequence, before importance weights.
    ``rng`` is not used."""
    network, burn_in, eps = networks.network, config.burn_in_length, config.value_rescaling_epsilon
    observation, next_observation = _observations(batch)
    first = recurrent.episode_starts(batch["terminated"], batch["truncated"])
    online_state = target_state = batch["extras"][STATE_KEY][:, 0]
    if burn_in:  # 1.
        _, states = recurrent.unroll(network, params, online_state, _part(observation, 0, burn_in), first[:, :burn_in])
        online_state = jax.lax.stop_gradient(states[:, -1])
        _, states = recurrent.unroll(
            network, target_params, target_state, _part(observation, 0, burn_in), first[:, :burn_in]
        )
        target_state = states[:, -1]
    observation, next_observation = _part(observation, burn_in), _part(next_observation, burn_in)
    first = first[:, burn_in:]
    y, online_states = recurrent.unroll(network, params, online_state, observation, first)  # 2.
    q = apply_network(network, params, y, method="heads")
    _, target_states = recurrent.unroll(network, target_params, target_state, observation, first)
    next_online = apply_network(
        network, params, recurrent.step_from(network, params, online_states, next_observation), method="heads"
    )
    next_target = apply_network(
        network,
        target_params,
        recurrent.step_from(network, target_params, target_states, next_observation),
        method="heads",
    )
    best = jnp.argmax(mask_logits(jax.lax.stop_gradient(next_online), action_mask(next_observation)), axis=-1)
    bootstrap = unrescale(jnp.take_along_axis(next_target, best[..., None], axis=-1)[..., 0], eps)  # 3.
    reward, terminated = batch["reward"][:, burn_in:], batch["terminated"][:, burn_in:].astype(jnp.float32)
    returns = n_step_targets(
        reward,
        terminated,
        batch["truncated"][:, burn_in:],
        bootstrap,  # 4.
        config.discount,
        config.n_step,
    )
    target = jax.lax.stop_gradient(rescale(returns, eps))
    q_taken = jnp.take_along_axis(q, batch["action"][:, burn_in:, None].astype(jnp.int32), axis=-1)[..., 0]
    delta = q_taken - target  # 5.
    return LossOutput(jnp.mean(0.5 * jnp.square(delta), axis=1), jnp.abs(delta), q_taken)


# The loss seam (as DQN's, ``shoal.agents.dqn.learning.Loss``): an R2D2 variant is a config
# subclass and a function of this shape; ``make_update`` keeps the rest (the importance weights,
# the optimizer, the target network, the priorities, the all-reduce over devices).
# ``loss(networks, params, target_params, batch, rng, config) -> LossOutput``: ``batch`` one
# device's sequences of ``burn_in + T`` steps (``observation``, ``action``, ``reward``,
# ``terminated``, ``truncated``, ``next_observation``, ``extras["core_state"]``); ``rng`` a key of
# this SGD step (the same on every device).
Loss = Callable[[R2D2Networks, optax.Params, optax.Params, dict, jax.Array, R2D2Config], LossOutput]


def make_update(
    networks: R2D2Networks, config: R2D2Config, loss: Loss = r2d2_loss, key: jax.Array | None = None
) -> UpdateFn:
    """One SGD step on ``loss`` per batch, importance-weighted (step 5); ``key`` seeds the loss's
    ``rng`` (folded with the step count: a resumed run draws the same keys)."""
    optimizer = make_optimizer(config)
    key = jax.random.PRNGKey(0) if key is None else key

    def weighted_loss(
        params: optax.Params,
        target_params: optax.Params,
        batch: Batch,
        rng: jax.Array,
    ) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
        out = loss(networks, params, target_params, batch, rng, config)
        weight = batch["probability"] ** -config.importance_sampling_exponent  # 5.
        weight = weight / jax.lax.pmax(jnp.max(weight), AXIS_NAME)
        return jnp.mean(weight * out.losses), (out.td_abs, jnp.mean(out.q))

    def update(state: TrainingState, batch: Batch) -> tuple[TrainingState, UpdateOutput]:
        rng = jax.random.fold_in(key, state.steps)
        (loss_value, (td_abs, q_mean)), grads = jax.value_and_grad(weighted_loss, has_aux=True)(
            state.params, state.target_params, batch, rng
        )
        grads = jax.lax.pmean(grads, AXIS_NAME)
        updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        steps = state.steps + 1
        target_params = optax.periodic_update(params, state.target_params, steps, config.target_update_period)  # 7.
        metrics = jax.lax.pmean({"loss": loss_value, "q": q_mean, "td_abs": jnp.mean(td_abs)}, AXIS_NAME)
        priorities = sequence_priorities(td_abs, config.max_priority_weight)  # 6.
        return TrainingState(params, target_params, opt_state, steps), UpdateOutput(metrics, 1, priorities)

    return update


def epsilons(config: R2D2Config) -> np.ndarray:
    """Ape-X's set of exploration rates, ``epsilon_base ** (1 + epsilon_alpha * i / 255)``."""
    return config.epsilon_base ** (1.0 + config.epsilon_alpha * np.arange(NUM_EPSILONS) / (NUM_EPSILONS - 1))


def extras_spec(config: R2D2Config) -> dict[str, ArraySpec]:
    """The LSTM state each step was acted from (the learner reads a sequence's first)."""
    return recurrent.state_spec(config.lstm_size)


def make_policy(networks: R2D2Networks, config: R2D2Config, evaluation: bool) -> Policy:
    """Epsilon-greedy on the online Q (module docstring), carrying the LSTM state and each env's
    epsilon (``-1`` until its episode's first step draws one); evaluation uses ``eval_epsilon``
    (with ``eval_epsilon`` 0 it draws no random numbers: ``shoal export``)."""
    network, num_actions = networks.network, networks.num_actions
    choices = jnp.asarray(epsilons(config), jnp.float32)

    def initial_state(num_envs: int) -> dict:
        return {
            "core": recurrent.initial_state(num_envs, config.lstm_size),
            "epsilon": jnp.full((num_envs,), -1.0, jnp.float32),
        }

    def policy(
        params: optax.Params,
        key: jax.Array,
        observation: Pytree,
        info: ActorInfo,
        state: dict[str, Any],
    ) -> tuple[jax.Array, dict[str, jax.Array], jax.Array, dict[str, jax.Array]]:
        observation = _as_network_input(observation)
        core, q = apply_network(network, params, state["core"], observation)
        mask = action_mask(observation)
        greedy = jnp.argmax(mask_logits(q, mask), axis=-1).astype(jnp.int32)
        if evaluation and config.eval_epsilon == 0:  # (no random draw: shoal export's greedy policy)
            return greedy, {}, key, {"core": core, "epsilon": jnp.zeros(greedy.shape, jnp.float32)}
        key, draw_key, explore_key, action_key = jax.random.split(key, 4)
        if evaluation:
            epsilon = jnp.full(greedy.shape, config.eval_epsilon, jnp.float32)
        else:
            drawn = choices[jax.random.randint(draw_key, greedy.shape, 0, NUM_EPSILONS)]
            epsilon = jnp.where(state["epsilon"] < 0, drawn, state["epsilon"])
        if mask is None:
            random_actions = jax.random.randint(action_key, greedy.shape, 0, num_actions, jnp.int32)
        else:  # uniform over the allowed actions
            random_actions = jax.random.categorical(action_key, jnp.where(mask, 0.0, MASKED_LOGIT)).astype(jnp.int32)
        action = jnp.where(jax.random.uniform(explore_key, greedy.shape) < epsilon, random_actions, greedy)
        extras = {} if evaluation else {STATE_KEY: state["core"]}
        return action, extras, key, {"core": core, "epsilon": epsilon}

    return Policy(policy, {} if evaluation else extras_spec(config), initial_state=initial_state)
