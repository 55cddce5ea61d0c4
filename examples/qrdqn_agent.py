"""QR-DQN as a Shoal plug-in agent, in one module outside the package (Dabney et al., 2018,
"Distributional Reinforcement Learning with Quantile Regression", arXiv:1710.10044)::

    PYTHONPATH=$PWD/examples shoal train --agent qrdqn_agent:QRDQNBuilder --env CartPole-v1

Replay, the n-step adder and the dataset are DQN's (``TransitionReplayBuilder``). What is new:
the network predicts, for each action, ``N`` quantiles ``theta_1..N`` of the return at the
fractions ``tau_i = (2i - 1) / 2N``; ``Q(s, a)`` is their mean. For a batch of n-step
transitions ``(s, a, R, d, s')`` (``R`` the n-step return, ``d`` the bootstrap discount, 0
after termination -- see ``shoal.replay.adders``):

    a*        = argmax_a' mean_j theta_j(s', a'; target)        # the target net chooses (the paper's)
    y_j       = R + d * theta_j(s', a*; target),  j = 1..N      # N samples of the target return
    u_ij      = y_j - theta_i(s, a; online)
    rho_i(u)  = |tau_i - 1{u < 0}| * huber_kappa(u) / kappa      # quantile Huber loss
    loss      = mean over the batch of  sum_i mean_j rho_i(u_ij)

Gradients are averaged over devices (``pmean``), clipped and applied with Adam; the target
params are the online ones every ``target_update_period`` SGD steps; one learner update is
``sgd_steps_per_update`` such steps in one ``lax.scan``. Acting is epsilon-greedy on ``Q``.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from shoal.agents.dqn.learning import epsilon_at
from shoal.agents.presets import Preset
from shoal.agents.transition_replay import TransitionReplayBuilder
from shoal.core.settings import setting
from shoal.core.specs import EnvironmentSpec
from shoal.core.types import ActorInfo, Policy
from shoal.learners import AXIS_NAME, ReplicatedLearner, scan_sgd_steps


@dataclasses.dataclass
class QRDQNConfig:
    """QR-DQN settings, each checked against its range before a run starts. The fields DQN has
    too mean what they mean in ``shoal.agents.dqn.DQNConfig``, with its defaults (CartPole-v1).

    Attributes:
      num_quantiles: ``N``, the quantiles of the return predicted for each action.
      kappa: the quantile Huber loss is quadratic for ``|u| <= kappa``, linear beyond.
    """

    num_quantiles: int = setting(32, low=1, high=10_000)
    kappa: float = setting(1.0, low=0.0, low_open=True)
    learning_rate: float = setting(4e-3, low=0.0, low_open=True, high=1.0)
    batch_size: int = setting(64, low=1, high=1_000_000)
    discount: float = setting(0.99, low=0.0, high=1.0)
    n_step: int = setting(3, low=1, high=1_000)
    hidden_sizes: tuple[int, ...] = setting((64, 64), low=1, high=65_536, items=True)
    target_update_period: int = setting(100, low=1)
    samples_per_insert: float = setting(32.0, low=0.0, low_open=True, high=10_000.0)
    samples_per_insert_tolerance: float = setting(0.1, low=0.0, low_open=True, high=1_000.0)
    sgd_steps_per_update: int = setting(8, low=1, high=10_000)
    min_replay_size: int = setting(1_000, low=1)
    max_replay_size: int = setting(100_000, low=1, high=1_000_000_000)
    epsilon_start: float = setting(1.0, low=0.0, high=1.0)
    epsilon_end: float = setting(0.04, low=0.0, high=1.0)
    epsilon_decay_steps: int = setting(8_000, low=1)
    eval_epsilon: float = setting(0.0, low=0.0, high=1.0)
    max_gradient_norm: float = setting(10.0, low=0.0, low_open=True)
    variable_update_period: int = setting(1, low=1, high=1_000_000)


class QuantileNetwork(nn.Module):
    """An MLP: observations ``[batch, ...]`` -> quantiles ``[batch, num_actions, num_quantiles]``."""

    hidden_sizes: tuple[int, ...]
    num_actions: int
    num_quantiles: int

    @nn.compact
    def __call__(self, observation: jax.Array) -> jax.Array:
        x = observation.reshape(observation.shape[0], -1).astype(jnp.float32)
        for size in self.hidden_sizes:
            x = nn.relu(nn.Dense(size)(x))
        return nn.Dense(self.num_actions * self.num_quantiles)(x).reshape(
            -1, self.num_actions, self.num_quantiles)


class Networks(NamedTuple):
    network: QuantileNetwork
    observation_shape: tuple[int, ...]


class TrainingState(NamedTuple):
    params: optax.Params  # (the learner serves the field named params to the actors)
    target_params: optax.Params
    opt_state: optax.OptState
    steps: jax.Array


def quantile_huber_loss(quantiles: jax.Array, targets: jax.Array, kappa: float) -> jax.Array:
    """``sum_i mean_j rho_i(y_j - theta_i)`` of one transition: ``quantiles`` ``theta`` ``[N]``,
    ``targets`` ``y`` ``[M]``."""
    tau = (jnp.arange(quantiles.shape[-1]) + 0.5) / quantiles.shape[-1]
    u = targets[None, :] - quantiles[:, None]  # [N, M]
    rho = jnp.abs(tau[:, None] - (u < 0)) * optax.huber_loss(u, delta=kappa) / kappa
    return jnp.sum(jnp.mean(rho, axis=1))


def make_update(network: QuantileNetwork, optimizer: optax.GradientTransformation, config: QRDQNConfig):
    """The learner's update: ``sgd_steps_per_update`` scanned SGD steps on ``[batch, k, ...]``."""

    def loss_fn(params, target_params, batch):
        rows = jnp.arange(batch["action"].shape[0])
        theta = network.apply(params, batch["observation"])[rows, batch["action"].astype(jnp.int32)]  # [B, N]
        theta_next = network.apply(target_params, batch["next_observation"])  # [B, A, N]
        best_next = jnp.argmax(theta_next.mean(axis=-1), axis=-1)
        targets = batch["reward"][:, None] + batch["discount"][:, None] * theta_next[rows, best_next]
        losses = jax.vmap(quantile_huber_loss, (0, 0, None))(theta, jax.lax.stop_gradient(targets), config.kappa)
        return jnp.mean(losses), jnp.mean(theta)

    def sgd_step(state: TrainingState, batch):
        (loss, q_mean), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params, state.target_params, batch)
        grads = jax.lax.pmean(grads, AXIS_NAME)  # every device applies the same update
        updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        target_params = optax.periodic_update(params, state.target_params, state.steps + 1,
                                              config.target_update_period)
        metrics = {"loss": jax.lax.pmean(loss, AXIS_NAME), "q_mean": jax.lax.pmean(q_mean, AXIS_NAME)}
        return TrainingState(params, target_params, opt_state, state.steps + 1), metrics, None

    return scan_sgd_steps(sgd_step)


class QRDQNBuilder(TransitionReplayBuilder):
    """QR-DQN on DQN's replay: n-step transitions from a rate-limited uniform table."""

    name = "qrdqn"
    config: QRDQNConfig  # (how `shoal train --agent` finds the config dataclass)
    presets = [Preset("qrdqn", "classic", "DQN's classic settings, 32 quantiles (CartPole-v1)")]

    def validate(self, spec: EnvironmentSpec, num_devices: int) -> None:
        if spec.num_actions is None:
            raise ValueError(f"QR-DQN needs a discrete action space; this environment's is {spec.action_space}")
        super().validate(spec, num_devices)  # every setting against its range; the replay's sizes

    def make_networks(self, spec: EnvironmentSpec) -> Networks:
        c = self.config
        return Networks(QuantileNetwork(tuple(c.hidden_sizes), spec.num_actions, c.num_quantiles),
                        spec.observation_shape)

    def make_policy(self, networks: Networks, spec: EnvironmentSpec, evaluation: bool) -> Policy:
        c = self.config

        def policy(params, key, observation, info: ActorInfo):
            q = networks.network.apply(params, observation).mean(axis=-1)  # [batch, actions]
            greedy = jnp.argmax(q, axis=-1).astype(jnp.int32)
            epsilon = c.eval_epsilon if evaluation else epsilon_at(info.env_steps, c)  # linear decay
            key, explore_key, action_key = jax.random.split(key, 3)
            random_actions = jax.random.randint(action_key, greedy.shape, 0, spec.num_actions, jnp.int32)
            explore = jax.random.uniform(explore_key, greedy.shape) < epsilon
            return jnp.where(explore, random_actions, greedy), {}, key

        return Policy(policy)

    def optimizer(self) -> optax.GradientTransformation:
        c = self.config
        return optax.chain(optax.clip_by_global_norm(c.max_gradient_norm), optax.adam(c.learning_rate))

    def init_state(self, key, networks: Networks) -> TrainingState:
        """(Also what Shoal's memory check traces before a run.)"""
        params = networks.network.init(key, jnp.zeros((1, *networks.observation_shape), jnp.float32))
        return TrainingState(params, params, self.optimizer().init(params), jnp.zeros((), jnp.int32))

    def make_learner(self, key, networks: Networks, dataset, logger=None, counter=None,
                     replay_client=None, stopwatch=None) -> ReplicatedLearner:
        return ReplicatedLearner(self.init_state(key, networks), make_update(networks.network, self.optimizer(),
                                                                             self.config),
                                 dataset, counter=counter, logger=logger, stopwatch=stopwatch)
