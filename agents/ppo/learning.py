"""PPO's update and policies, written top to bottom.

A learner update takes env sequences ``[rows, T, ...]`` (``rows = rollouts x envs``; each step
carries its own next observation, see ``shoal.replay.adders``) and, on each device's rows:

1. observations normalized with the running statistics the actors acted with (if
   ``normalize_observations``), and rewards scaled by the running standard deviation of the
   discounted return, after merging the returns the actors recorded (if ``normalize_rewards``;
   ``shoal.agents.components.normalization``);
2. values with the current params, ``v_t = V(s_t)`` and ``v'_t = V(s'_t)`` (on-policy, the
   params the rollouts were acted with: ``v_t`` is the "old" value CleanRL records at acting);
3. generalized advantage estimation (Schulman et al., 2016), backwards over t::

       delta_t = r_t + gamma * (1 - terminated_t) * v'_t - v_t
       A_t     = delta_t + gamma * lambda * (1 - done_t) * A_{t+1}     (done = terminated or truncated)
       R_t     = A_t + v_t

   so a termination does not bootstrap, a truncation bootstraps from its final observation, and
   no trace crosses an episode end (sequences are not cut at episode ends);
4. the schedules' remaining fraction for this update, from the env steps trained on before it::

       E        = rows x devices x T                     (env steps per update: the global batch)
       n        = (optimizer steps so far) // (num_epochs * num_minibatches)      (updates done)
       f        = max(0, 1 - n * E / schedule_env_steps)
       lr, eps  = learning_rate * f, clip_epsilon * f    (each only if its schedule is ``linear``)

   The optimizer steps are Adam's own count, saved in checkpoints: a resumed run, and a run on
   any number of devices, continue the same schedule. ``f`` is constant over an update's
   epochs, as CleanRL's ``anneal_lr`` (``1 - (iteration - 1) / num_iterations``). A rollout
   dropped for policy lag is not trained on, so it does not advance the schedules;
5. ``num_epochs`` passes of ``num_minibatches`` SGD steps (``shoal.learners.minibatch_epochs``),
   each minimizing, with ``rho = pi(a|s) / mu(a|s)`` (``mu``: the behaviour policy, whose
   log-probability the actor recorded) and advantages standardized over the minibatch::

       L = -mean(min(rho * A, clip(rho, 1 - eps, 1 + eps) * A))
           + value_coef * L_V - entropy_coef * mean(entropy(pi(.|s)))
       L_V = mean((V(s) - R)^2) / 2
       L_V = mean(max((V(s) - R)^2, (V_clip - R)^2)) / 2,  V_clip = v + clip(V(s) - v, -eps, eps)
                                                            (with ``clip_value_loss``; v of step 2)

   Gradients are averaged over devices (``pmean``), clipped by global norm, applied with Adam
   at step size ``lr``;
6. the observation statistics merged with this batch's observations (the next rollouts act with
   them: the statistics travel with the params to actors and the evaluator, one set per run).

The policy is categorical over discrete actions, or a Gaussian with a state-independent
log-std over Box actions (``shoal.agents.components.distributions``; the env clips the sampled action).
With action masks (an ``action_mask`` stored with each observation), the categorical is over
the allowed actions (``shoal.agents.components.dict_observations.mask_logits``): actions are sampled among them,
and ``pi(a|s)``, ``mu(a|s)`` and the entropy of step 5 are those of the renormalised allowed set.
With Box actions the mask names the action's entries in use (agents of different action sizes
in one layout): an entry not in use is drawn from a fixed N(0, 1) (``masked``), which cancels
in the ratio and carries no gradient.
For a Dict observation, normalization (step 1, 6) applies to its float vector keys, one set of
statistics per key; image keys and the mask are left as they are.

Recurrent PPO (``lstm_size > 0``) differs in steps 2 and 5 only: values come from unrolling
the LSTM over each sequence from the state the actor recorded at its first step, and the
minibatches are whole sequences (``shoal.agents.ppo.recurrent``).

Step 5's loss is a seam (as DQN's): ``make_update(networks, config, loss)`` minimizes any
``Loss`` -- a plain function of the params, one minibatch, a key and the config, returning the
loss and its metrics -- and keeps the rest (the state, normalization, GAE, the schedules, the
optimizer, the minibatch epochs over devices). A PPO variant (PPO with an adaptive KL penalty in
``examples/ppo_kl_agent.py``) is a config subclass and a builder whose ``loss`` is another one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from shoal.agents.components import distributions, normalization
from shoal.agents.components.dict_observations import action_mask, example_observation, mask_logits, normalized_keys
from shoal.agents.components.flax_apply import apply_network
from shoal.agents.components.networks import ActorCriticNetworks, has_convolutions
from shoal.agents.components.normalization import RunningStats
from shoal.agents.components.recurrent import init_params
from shoal.agents.ppo import recurrent
from shoal.agents.ppo.config import PPOConfig
from shoal.core.types import Batch, Params, Pytree
from shoal.learners.updates import AXIS_NAME, UpdateFn, UpdateOutput, minibatch_epochs, sequence_minibatch_epochs


class TrainingState(NamedTuple):
    params: dict  # {"network": ..., "observation": RunningStats}: what actors pull
    opt_state: optax.OptState
    key: jax.Array
    return_stats: RunningStats  # of the discounted returns the actors record (reward scaling)


def remaining(config: PPOConfig, optimizer_steps: jax.Array, env_steps_per_update: int) -> jax.Array:
    """The fraction ``f`` of a ``linear`` schedule left at ``optimizer_steps`` (module
    docstring, step 4)."""
    updates = jnp.asarray(optimizer_steps) // (config.num_epochs * config.num_minibatches)
    trained = updates.astype(jnp.float32) * (env_steps_per_update / config.schedule_env_steps)
    return jnp.maximum(0.0, 1.0 - trained)


def learning_rate(config: PPOConfig, env_steps_per_update: int | None) -> optax.ScalarOrSchedule:
    """Adam's step size: ``learning_rate``, or with a ``linear`` schedule a function of the
    optimizer's step count."""
    if config.learning_rate_schedule == "constant":
        return config.learning_rate

    def schedule(count: jax.Array) -> jax.Array:
        if env_steps_per_update is None:  # (init_state's optimizer: its schedule is never called)
            raise ValueError(
                "a linear learning_rate_schedule needs env_steps_per_update (make_update reads it off the batch)"
            )
        return config.learning_rate * remaining(config, count, env_steps_per_update)

    return schedule


def clip_epsilon(config: PPOConfig, optimizer_steps: jax.Array, env_steps_per_update: int) -> float | jax.Array:
    """The clip range at ``optimizer_steps``: ``clip_epsilon``, decayed if its schedule is ``linear``."""
    if config.clip_schedule == "constant":
        return config.clip_epsilon
    return config.clip_epsilon * remaining(config, optimizer_steps, env_steps_per_update)


def make_optimizer(config: PPOConfig, env_steps_per_update: int | None = None) -> optax.GradientTransformation:
    """Global-norm clipping, then Adam (at the scheduled step size). The state's layout does not
    depend on ``env_steps_per_update`` (``init_state`` passes none; ``make_update`` reads it
    off the batch)."""
    return optax.chain(
        optax.clip_by_global_norm(config.max_gradient_norm),
        optax.adam(learning_rate(config, env_steps_per_update), eps=1e-5),
    )


def optimizer_steps(opt_state: optax.OptState) -> jax.Array:
    """Adam's step count in ``make_optimizer``'s state: ``(clip's state, (Adam's, step size's))``."""
    return opt_state[1][0].count


def init_state(key: jax.Array, networks: ActorCriticNetworks, config: PPOConfig) -> TrainingState:
    @jax.jit  # one compiled computation, not dozens of eagerly dispatched ones
    def init(key: jax.Array) -> TrainingState:
        params_key, key = jax.random.split(key)
        if recurrent.is_recurrent(networks.network):
            network = init_params(networks.network, params_key, networks.observation_shape)
        else:
            network = networks.network.init(params_key, example_observation(networks.observation_shape))
        params = {"network": network, "observation": observation_stats(networks)}
        return TrainingState(params, make_optimizer(config).init(network), key, normalization.init_stats())

    return init(key)


def observation_stats(networks: ActorCriticNetworks) -> RunningStats | dict[str, RunningStats]:
    """Fresh observation statistics: of the observation, or of each float vector key of a Dict
    observation (none where the networks do not say the observation's dtypes)."""
    if not isinstance(networks.observation_shape, dict):
        return normalization.init_stats(networks.observation_shape)
    observation = networks.observation
    keys = normalized_keys(observation) if isinstance(observation, Mapping) else ()
    return {key: normalization.init_stats(networks.observation_shape[key]) for key in keys}


# The network's policy output: categorical logits, or a Gaussian's ``(mean, log_std)``.
PolicyOutput = Any


class Head(NamedTuple):
    """The policy's distribution over actions, from the network's policy output."""

    log_prob: Callable[[PolicyOutput, jax.Array], jax.Array]  # (policy output, action) -> [batch]
    entropy: Callable[[PolicyOutput], jax.Array]  # policy output -> [batch]
    sample: Callable[[jax.Array, PolicyOutput], jax.Array]  # (key, policy output) -> action
    mode: Callable[[PolicyOutput], jax.Array]  # policy output -> the most likely action


def head(networks: ActorCriticNetworks) -> Head:
    if networks.num_actions is not None:
        return Head(
            distributions.categorical_log_prob,
            distributions.categorical_entropy,
            lambda key, logits: jax.random.categorical(key, logits).astype(jnp.int32),
            lambda logits: jnp.argmax(logits, axis=-1).astype(jnp.int32),
        )
    return Head(
        lambda out, action: distributions.gaussian_log_prob(out[0], out[1], action),
        lambda out: distributions.gaussian_entropy(*out),
        lambda key, out: distributions.gaussian_sample(key, *out),
        lambda out: out[0],
    )


def gae(
    reward: jax.Array,
    terminated: jax.Array,
    truncated: jax.Array,
    value: jax.Array,
    next_value: jax.Array,
    discount: float,
    lambda_: float,
) -> jax.Array:
    """Advantages ``[rows, T]`` by the recursion in the module docstring."""
    delta = reward + discount * (1.0 - terminated) * next_value - value
    carry_on = discount * lambda_ * (1.0 - jnp.maximum(terminated, truncated))

    def backwards(next_advantage: jax.Array, step: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
        delta_t, carry_on_t = step
        advantage = delta_t + carry_on_t * next_advantage
        return advantage, advantage

    _, advantages = jax.lax.scan(backwards, jnp.zeros(reward.shape[0]), (delta.T, carry_on.T), reverse=True)
    return advantages.T


def global_standardize(x: jax.Array) -> jax.Array:
    """``x`` standardized with its mean and variance over every device's minibatch."""
    mean = jax.lax.pmean(jnp.mean(x), AXIS_NAME)
    variance = jax.lax.pmean(jnp.mean(jnp.square(x - mean)), AXIS_NAME)
    return (x - mean) / (jnp.sqrt(variance) + 1e-8)


def observe(params: dict, observation: Pytree, config: PPOConfig) -> Pytree:
    """Observations as the network sees them (normalized with the run's statistics, if on; for a
    Dict observation, its keys that have statistics)."""
    if isinstance(observation, dict):
        stats = params["observation"] if config.normalize_observations else {}
        return {
            key: normalization.normalize(stats[key], x.astype(jnp.float32)) if key in stats else x
            for key, x in observation.items()
        }
    observation = observation.astype(jnp.float32)
    if config.normalize_observations:
        return normalization.normalize(params["observation"], observation)
    return observation


def update_observation_stats(
    stats: RunningStats | dict[str, RunningStats],
    observation: Pytree,
) -> RunningStats | dict[str, RunningStats]:
    """The statistics after a batch of observations (each normalized key's, for a Dict)."""
    if isinstance(observation, dict):
        return {key: normalization.update(s, observation[key], AXIS_NAME) for key, s in stats.items()}
    return normalization.update(stats, observation, AXIS_NAME)


def value_loss(
    value: jax.Array, old_value: jax.Array, target: jax.Array, epsilon: float | jax.Array, clip: bool
) -> jax.Array:
    """``L_V`` of the module docstring (step 5): half the mean squared error of ``value`` against
    ``target``, or with ``clip`` the larger of it and that of ``value`` kept within ``epsilon`` of
    ``old_value`` (CleanRL's ``clip_vloss``)."""
    error = jnp.square(value - target)
    if clip:
        clipped = old_value + jnp.clip(value - old_value, -epsilon, epsilon)
        error = jnp.maximum(error, jnp.square(clipped - target))
    return 0.5 * jnp.mean(error)


def masked(policy_out: PolicyOutput, mask: jax.Array | None) -> PolicyOutput:
    """The policy output restricted to the allowed actions: categorical logits masked; for a
    Gaussian (mean, log-std), each action entry not in use drawn from a fixed N(0, 1), so that
    it adds the same log-probability when acting and learning (the ratio does not see it) and
    no parameter gets a gradient from it or from its entropy."""
    if mask is None:
        return policy_out
    if isinstance(policy_out, tuple):
        mean, log_std = policy_out
        return jnp.where(mask, mean, 0.0), jnp.where(mask, log_std, 0.0)
    return mask_logits(policy_out, mask)


def forward(networks: ActorCriticNetworks, params: optax.Params, minibatch: dict) -> tuple[Any, jax.Array]:
    """The policy output (``masked`` to the allowed actions) and the value at every step of a
    minibatch: of its steps, or of its whole sequences for recurrent PPO (``minibatch``'s
    ``initial_state`` and ``first``)."""
    if recurrent.is_recurrent(networks.network):
        policy_out, value = recurrent.forward(networks.network, params, minibatch)
    else:
        policy_out, value = apply_network(networks.network, params, minibatch["observation"])
    return masked(policy_out, action_mask(minibatch["observation"])), value


def ppo_loss(
    networks: ActorCriticNetworks,
    params: optax.Params,
    minibatch: dict,
    rng: jax.Array,
    config: PPOConfig,
    clip_epsilon: float | jax.Array,
) -> tuple[jax.Array, dict]:
    """PPO's loss on one device's minibatch (module docstring, step 5): the clipped surrogate, the
    value loss and the entropy bonus. ``rng`` is not used (PPO's loss draws nothing)."""
    dist = head(networks)
    policy_out, value = forward(networks, params, minibatch)
    log_prob = dist.log_prob(policy_out, minibatch["action"])
    log_rho = log_prob - minibatch["log_prob"]
    rho = jnp.exp(log_rho)
    advantage = minibatch["advantage"]
    if config.normalize_advantages:
        advantage = global_standardize(advantage)
    clipped_rho = jnp.clip(rho, 1.0 - clip_epsilon, 1.0 + clip_epsilon)
    policy_loss = -jnp.mean(jnp.minimum(rho * advantage, clipped_rho * advantage))
    v_loss = value_loss(value, minibatch["value"], minibatch["return"], clip_epsilon, config.clip_value_loss)
    entropy = jnp.mean(dist.entropy(policy_out))
    loss = policy_loss + config.value_coef * v_loss - config.entropy_coef * entropy
    return loss, {
        "loss": loss,
        "policy_loss": policy_loss,
        "value_loss": v_loss,
        "entropy": entropy,
        "approx_kl": jnp.mean((rho - 1.0) - log_rho),
        "clip_fraction": jnp.mean(jnp.abs(rho - 1.0) > clip_epsilon),
    }


# The loss seam (as DQN's, ``shoal.agents.dqn.learning.Loss``): a PPO variant is a config subclass
# and a function of this shape; ``make_update`` keeps the rest (the state, normalization, GAE, the
# schedules, the optimizer, the minibatch epochs over devices).
# ``loss(networks, params, minibatch, rng, config, clip_epsilon) -> (loss, metrics)``: ``params``
# the network's; ``minibatch`` one device's, holding ``observation`` (normalized), ``action``,
# ``log_prob`` (the behaviour policy's), ``advantage`` (GAE's, not yet standardized), ``return``,
# ``value`` (the value at acting, step 2) and for recurrent PPO ``initial_state`` and ``first``;
# ``rng`` a key of this SGD step (the same on every device: ``global_row_keys`` gives per-row keys);
# ``clip_epsilon`` the scheduled clip range; ``metrics`` scalars, averaged over devices and steps.
Loss = Callable[[ActorCriticNetworks, optax.Params, dict, jax.Array, PPOConfig, Any], tuple[jax.Array, dict]]


def make_update(networks: ActorCriticNetworks, config: PPOConfig, loss: Loss = ppo_loss) -> UpdateFn:
    """The learner's update (module docstring), minimizing ``loss`` on each minibatch."""
    network = networks.network
    rnn = recurrent.is_recurrent(network)

    def update(state: TrainingState, batch: Batch) -> tuple[TrainingState, UpdateOutput]:
        rows, length = batch["reward"].shape
        # env steps per update (the global batch), for the schedules (psum of a constant: an int)
        env_steps_per_update = rows * length * jax.lax.psum(1, AXIS_NAME)
        optimizer, steps = make_optimizer(config, env_steps_per_update), optimizer_steps(state.opt_state)
        lr = learning_rate(config, env_steps_per_update)
        lr = lr(steps) if callable(lr) else lr  # (constant over the update's steps: for the log)
        epsilon = clip_epsilon(config, steps, env_steps_per_update)

        def sgd_step(state: TrainingState, minibatch: Batch) -> tuple[TrainingState, dict[str, jax.Array], None]:
            rng = jax.random.fold_in(state.key, optimizer_steps(state.opt_state))
            grads, metrics = jax.grad(
                lambda params: loss(networks, params, minibatch, rng, config, epsilon), has_aux=True
            )(state.params["network"])
            grads = jax.lax.pmean(grads, AXIS_NAME)  # all-reduce: every device applies the same update
            updates, opt_state = optimizer.update(grads, state.opt_state, state.params["network"])
            params = {**state.params, "network": optax.apply_updates(state.params["network"], updates)}
            return state._replace(params=params, opt_state=opt_state), jax.lax.pmean(metrics, AXIS_NAME), None

        observation = observe(state.params, batch["observation"], config)
        next_observation = observe(state.params, batch["next_observation"], config)
        sequences = recurrent.sequence_inputs(batch) if rnn else {}
        if rnn:
            value, next_value = recurrent.values(
                network, state.params["network"], observation, next_observation, sequences
            )
        else:
            value, next_value = feed_forward_values(network, state.params["network"], observation, next_observation)
        reward, return_stats = batch["reward"], state.return_stats
        if config.normalize_rewards:
            return_stats = normalization.update(return_stats, batch["extras"]["discounted_return"], AXIS_NAME)
            reward = normalization.scale(return_stats, reward)
        advantage = gae(
            reward,
            batch["terminated"].astype(jnp.float32),
            batch["truncated"].astype(jnp.float32),
            value,
            next_value,
            config.discount,
            config.gae_lambda,
        )
        data = {
            "observation": observation,
            "action": batch["action"],
            "log_prob": batch["extras"]["log_prob"],
            "advantage": advantage,
            "return": advantage + value,
            "value": value,
            **sequences,
        }
        key, epochs_key = jax.random.split(state.key)
        epochs = sequence_minibatch_epochs if rnn else minibatch_epochs  # (whole sequences, or steps)
        state, out = epochs(
            sgd_step,
            state._replace(key=key, return_stats=return_stats),
            data,
            epochs_key,
            num_epochs=config.num_epochs,
            num_minibatches=config.num_minibatches,
            unroll=has_convolutions(network),
        )  # (convolutions: see _loop)
        if config.normalize_observations:  # after the update: the next rollouts act with these
            stats = update_observation_stats(state.params["observation"], batch["observation"])
            state = state._replace(params={**state.params, "observation": stats})
        schedules = {"learning_rate": jnp.asarray(lr, jnp.float32), "clip_epsilon": jnp.asarray(epsilon, jnp.float32)}
        return state, out._replace(metrics={**out.metrics, **schedules})

    return update


def feed_forward_values(
    network: nn.Module,
    params: Params,
    observation: Pytree,
    next_observation: Pytree,
) -> tuple[jax.Array, jax.Array]:
    """``(v_t, v'_t)`` ``[rows, T]``: the value network on both, in one call."""
    rows, length = jax.tree_util.tree_leaves(observation)[0].shape[:2]
    flat = lambda x: x.reshape(rows * length, *x.shape[2:])  # noqa: E731
    both = jax.tree_util.tree_map(
        lambda s, s_next: jnp.concatenate([flat(s), flat(s_next)]), observation, next_observation
    )
    _, values = apply_network(network, params, both)
    value, next_value = jnp.split(values.reshape(2, rows, length), 2)
    return value[0], next_value[0]
