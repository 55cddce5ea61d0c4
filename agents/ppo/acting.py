"""PPO's acting policies: feed-forward, or recurrent (carrying the LSTM state from step to step,
``shoal.agents.ppo.recurrent``), and what they record beside each action."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from shoal.agents.components.dict_observations import action_mask
from shoal.agents.components.flax_apply import apply_network
from shoal.agents.components.networks import ActorCriticNetworks
from shoal.agents.components.recurrent import STATE_KEY, initial_state, state_spec
from shoal.agents.ppo import recurrent
from shoal.agents.ppo.config import PPOConfig
from shoal.agents.ppo.learning import PolicyOutput, head, masked, observe
from shoal.core.specs import ArraySpec
from shoal.core.types import ActorInfo, Policy, Pytree


def extras_spec(config: PPOConfig) -> dict[str, ArraySpec]:
    """What the acting policy records beside each action: its log-probability, the params
    version and, for recurrent PPO, the LSTM state it acted from; with reward normalization,
    what the adder adds (the discounted return so far, ``shoal.agents.components.normalization``)."""
    spec = {"log_prob": ArraySpec((), np.float32), "policy_version": ArraySpec((), np.int32)}
    if config.lstm_size:
        spec.update(state_spec(config.lstm_size))
    if config.normalize_rewards:
        spec["discounted_return"] = ArraySpec((), np.float32)
    return spec


def unused_zero(action: jax.Array, out: PolicyOutput, mask: jax.Array | None) -> jax.Array:
    """A Gaussian's sampled action with each entry not in use (its mask's) set to 0, the value
    the env sees there (the fixed N(0, 1) of ``masked`` gives it the same log-probability when
    acting and learning); a categorical's action as it is."""
    return jnp.where(mask, action, 0.0) if mask is not None and isinstance(out, tuple) else action


def make_policy(networks: ActorCriticNetworks, config: PPOConfig, evaluation: bool) -> Policy:
    """Sampling from the policy (recording its log-probability, the params version and, for
    recurrent PPO, the state it acted from), or for evaluation its most likely action (the
    Gaussian's mean), or a sample (``eval_sample``). Recurrent PPO's policy carries its LSTM
    state (``Policy.initial_state``)."""
    network, dist = networks.network, head(networks)
    rnn = recurrent.is_recurrent(network)

    def act(
        params: dict,
        key: jax.Array,
        observation: Pytree,
        info: ActorInfo,
        out: PolicyOutput,
        extras: dict[str, jax.Array],
    ) -> tuple[jax.Array, dict[str, jax.Array], jax.Array]:
        mask = action_mask(observation)
        out = masked(out, mask)
        if evaluation and not config.eval_sample:
            return dist.mode(out), {}, key
        key, sample_key = jax.random.split(key)
        action = unused_zero(dist.sample(sample_key, out), out, mask)
        if evaluation:
            return action, {}, key
        version = jnp.full(action.shape[:1], info.params_version, jnp.int32)
        return action, {"log_prob": dist.log_prob(out, action), "policy_version": version, **extras}, key

    def feed_forward(
        params: dict,
        key: jax.Array,
        observation: Pytree,
        info: ActorInfo,
    ) -> tuple[jax.Array, dict[str, jax.Array], jax.Array]:
        out = apply_network(network, params["network"], observe(params, observation, config), method="logits")
        return act(params, key, observation, info, out, {})

    def with_memory(
        params: dict,
        key: jax.Array,
        observation: Pytree,
        info: ActorInfo,
        state: jax.Array,
    ) -> tuple[jax.Array, dict[str, jax.Array], jax.Array, jax.Array]:
        next_state, out = recurrent.acting(network, params["network"], observe(params, observation, config), state)
        return (*act(params, key, observation, info, out, {STATE_KEY: state}), next_state)

    acting = {k: v for k, v in extras_spec(config).items() if k != "discounted_return"}  # (the adder adds that)
    if rnn:
        return Policy(
            with_memory,
            {} if evaluation else acting,
            initial_state=lambda num_envs: initial_state(num_envs, network.lstm_size),
        )
    return Policy(feed_forward, {} if evaluation else acting)
