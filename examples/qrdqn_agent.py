"""QR-DQN as a Shoal plug-in agent, in one module outside the package (Dabney et al., 2018,
"Distributional Reinforcement Learning with Quantile Regression", arXiv:1710.10044)::

    shoal train --agent qrdqn_agent:QRDQNBuilder --env CartPole-v1     # from this folder

QR-DQN is DQN with another network and another loss, so it is DQN's builder with two methods
overridden: everything else -- replay, the n-step adder, the dataset, epsilon-greedy acting on
``Q``, the optimizer, the target network, prioritized replay's weights and priorities, the scan
of SGD steps over devices -- is DQN's (``shoal.agents.dqn``).

The network predicts, for each action, ``N`` quantiles ``theta_1..N`` of the return at the
fractions ``tau_i = (2i - 1) / 2N``; ``Q(s, a)`` is their mean (what DQN's policy acts on). For
a batch of n-step transitions ``(s, a, R, d, s')`` (``R`` the n-step return, ``d`` the
bootstrap discount, 0 after termination -- see ``shoal.replay.adders``):

    a*        = argmax_a' mean_j theta_j(s', a'; target)        # the target net chooses (the paper's;
                                                                #   the online net with double_q=True)
    y_j       = R + d * theta_j(s', a*; target),  j = 1..N      # N samples of the target return
    u_ij      = y_j - theta_i(s, a; online)
    rho_i(u)  = |tau_i - 1{u < 0}| * huber_kappa(u) / kappa      # quantile Huber loss
    loss      = mean over the batch of  sum_i mean_j rho_i(u_ij)
"""

from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from shoal.agents.dqn import DQNBuilder, DQNConfig, DQNNetworks
from shoal.agents.dqn.learning import LossOutput
from shoal.agents.presets import Preset
from shoal.core.settings import setting
from shoal.core.specs import EnvironmentSpec


@dataclasses.dataclass
class QRDQNConfig(DQNConfig):
    """DQN's settings (``shoal.agents.dqn.DQNConfig``, with its defaults but ``double_q``), and:

    Attributes:
      num_quantiles: ``N``, the quantiles of the return predicted for each action.
      kappa: the quantile Huber loss is quadratic for ``|u| <= kappa``, linear beyond.
      double_q: ``False`` (the paper's): the target net chooses ``a*``; ``True``: the online net
        does (DQN's double-Q choice).
    """

    num_quantiles: int = setting(32, low=1, high=10_000)
    kappa: float = setting(1.0, low=0.0, low_open=True)
    double_q: bool = False


class QuantileNetwork(nn.Module):
    """An MLP: observations ``[batch, ...]`` -> ``quantiles`` ``[batch, num_actions, num_quantiles]``;
    called plainly, their mean: ``Q`` ``[batch, num_actions]``, what DQN's policy acts on."""

    hidden_sizes: tuple[int, ...]
    num_actions: int
    num_quantiles: int

    def setup(self) -> None:
        self.hidden = [nn.Dense(size) for size in self.hidden_sizes]
        self.out = nn.Dense(self.num_actions * self.num_quantiles)

    def quantiles(self, observation: jax.Array) -> jax.Array:
        x = observation.reshape(observation.shape[0], -1).astype(jnp.float32)
        for layer in self.hidden:
            x = nn.relu(layer(x))
        return self.out(x).reshape(-1, self.num_actions, self.num_quantiles)

    def __call__(self, observation: jax.Array) -> jax.Array:
        return self.quantiles(observation).mean(axis=-1)


def quantile_huber_loss(quantiles: jax.Array, targets: jax.Array, kappa: float) -> jax.Array:
    """``sum_i mean_j rho_i(y_j - theta_i)`` of one transition: ``quantiles`` ``theta`` ``[N]``,
    ``targets`` ``y`` ``[M]``."""
    tau = (jnp.arange(quantiles.shape[-1]) + 0.5) / quantiles.shape[-1]
    u = targets[None, :] - quantiles[:, None]  # [N, M]
    rho = jnp.abs(tau[:, None] - (u < 0)) * optax.huber_loss(u, delta=kappa) / kappa
    return jnp.sum(jnp.mean(rho, axis=1))


class QRDQNBuilder(DQNBuilder):
    """QR-DQN: DQN's builder with the quantile network and the quantile regression loss."""

    name = "qrdqn"
    config: QRDQNConfig  # (how `shoal train --agent` finds the config dataclass)
    presets = [Preset("qrdqn", "classic", "DQN's classic settings, 32 quantiles (CartPole-v1)")]

    def validate(self, spec: EnvironmentSpec, num_devices: int) -> None:
        if spec.dict_observations or len(spec.observation_shape) > 1:
            raise ValueError(
                f"this QR-DQN's network is an MLP on flat observations; this env's are {spec.observation_shape}"
            )
        super().validate(spec, num_devices)  # a discrete action space; every setting against its range

    def make_networks(self, spec: EnvironmentSpec) -> DQNNetworks:
        c = self.config
        network = QuantileNetwork(tuple(c.hidden_sizes), spec.num_actions, c.num_quantiles)
        return DQNNetworks(network, spec.observation_shape, spec.num_actions)

    def loss(self, network: QuantileNetwork, params, target_params, batch) -> LossOutput:
        rows = jnp.arange(batch["action"].shape[0])
        theta = network.apply(params, batch["observation"], method=QuantileNetwork.quantiles)
        theta = theta[rows, batch["action"].astype(jnp.int32)]  # [B, N]
        theta_next = network.apply(target_params, batch["next_observation"], method=QuantileNetwork.quantiles)
        chooser = network.apply(params, batch["next_observation"]) if self.config.double_q else theta_next.mean(-1)
        best_next = jnp.argmax(chooser, axis=-1)
        targets = batch["reward"][:, None] + batch["discount"][:, None] * theta_next[rows, best_next]  # [B, N]
        targets = jax.lax.stop_gradient(targets)
        losses = jax.vmap(quantile_huber_loss, (0, 0, None))(theta, targets, self.config.kappa)
        q = theta.mean(axis=-1)
        return LossOutput(losses, jnp.abs(q - targets.mean(axis=-1)), q)
