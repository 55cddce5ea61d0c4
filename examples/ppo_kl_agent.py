"""PPO with a KL penalty as a Shoal plug-in agent (Schulman et al., 2017, "Proximal Policy
Optimization Algorithms", arXiv:1707.06347, section 4: the KL-penalty objective)::

    shoal train --agent ppo_kl_agent:KLPPOBuilder --env CartPole-v1     # from this folder

It is PPO with another loss, so it is PPO's builder with a config subclass and a loss function
set on its loss seam (``shoal.agents.ppo.learning.Loss``): everything else -- the rollouts, the
queue, observation and reward normalization, GAE, the schedules, the optimizer, the minibatch
epochs over devices, recurrent PPO's unrolls (``lstm_size``) -- is PPO's (``shoal.agents.ppo``).

Instead of clipping the ratio ``rho = pi(a|s) / mu(a|s)`` (``mu`` the behaviour policy, whose
log-probability the actor recorded), the surrogate is penalized by the divergence of ``pi`` from
``mu``, estimated on the actions taken (the ``k3`` estimator: unbiased for ``KL(mu || pi)``, never
negative, and its gradient pulls ``rho`` back to 1)::

    KL   ~= mean((rho - 1) - log rho)
    L     = -mean(rho * A) + beta * KL + value_coef * L_V - entropy_coef * mean(entropy(pi(.|s)))

with ``A`` the advantages (standardized if ``normalize_advantages``) and ``L_V`` PPO's value loss.
``beta`` is fixed: the paper's fixed-coefficient variant (its adaptive one changes ``beta``
between updates after measuring the KL, which needs state that a loss does not carry).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from shoal.agents.ppo import PPOBuilder, PPOConfig
from shoal.agents.ppo.learning import forward, global_standardize, head, value_loss
from shoal.agents.presets import Preset
from shoal.core.settings import setting


@dataclasses.dataclass
class KLPPOConfig(PPOConfig):
    """PPO's settings (``shoal.agents.ppo.PPOConfig``, with its defaults; ``clip_epsilon`` now
    only clips the value loss, with ``clip_value_loss``), and:

    Attributes:
      kl_coef: ``beta``, the weight of the KL penalty.
    """

    kl_coef: float = setting(1.0, low=0.0, high=1_000.0)


def kl_penalty_loss(
    networks, params, minibatch: dict, rng: jax.Array, config: KLPPOConfig, clip_epsilon
) -> tuple[jax.Array, dict]:
    """The KL-penalized objective (module docstring) on one device's minibatch: PPO's loss seam,
    ``(networks, params, minibatch, rng, config, clip_epsilon) -> (loss, metrics)``."""
    dist = head(networks)
    policy_out, value = forward(networks, params, minibatch)
    log_rho = dist.log_prob(policy_out, minibatch["action"]) - minibatch["log_prob"]
    rho = jnp.exp(log_rho)
    advantage = minibatch["advantage"]
    if config.normalize_advantages:
        advantage = global_standardize(advantage)
    kl = jnp.mean((rho - 1.0) - log_rho)
    policy_loss = -jnp.mean(rho * advantage) + config.kl_coef * kl
    v_loss = value_loss(value, minibatch["value"], minibatch["return"], clip_epsilon, config.clip_value_loss)
    entropy = jnp.mean(dist.entropy(policy_out))
    loss = policy_loss + config.value_coef * v_loss - config.entropy_coef * entropy
    return loss, {"loss": loss, "policy_loss": policy_loss, "value_loss": v_loss, "entropy": entropy, "kl": kl}


class KLPPOBuilder(PPOBuilder):
    """PPO with a KL penalty: PPO's builder with the KL-penalized loss."""

    name = "ppo_kl"
    config: KLPPOConfig  # (how `shoal train --agent` finds the config dataclass)
    presets = [Preset("ppo_kl", "classic", "PPO's classic settings, KL coefficient 1 (CartPole-v1)")]
    loss = staticmethod(kl_penalty_loss)
