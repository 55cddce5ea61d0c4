"""Network building blocks shared by agents (flax)."""

from __future__ import annotations

from typing import NamedTuple, Sequence

import flax.linen as nn
import jax.numpy as jnp
import numpy as np

from shoal.agents.torsos import is_image, make_torso
from shoal.core.specs import EnvironmentSpec


class MLP(nn.Module):
    """``[batch, ...] -> [batch, output_size]``: tanh hidden layers, orthogonal init with gain
    ``sqrt(2)``, and the output layer's gain ``output_scale`` (small for a policy head, so the
    initial policy is near uniform)."""

    hidden_sizes: Sequence[int]
    output_size: int
    output_scale: float = 1.0

    @nn.compact
    def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
        x = x.reshape(x.shape[0], -1).astype(jnp.float32)
        for size in self.hidden_sizes:
            x = nn.tanh(nn.Dense(size, kernel_init=nn.initializers.orthogonal(np.sqrt(2)))(x))
        return nn.Dense(self.output_size, kernel_init=nn.initializers.orthogonal(self.output_scale))(x)


class ActorCritic(nn.Module):
    """``observation -> (logits [batch, num_actions], value [batch])``, two separate MLPs."""

    hidden_sizes: Sequence[int]
    num_actions: int

    def setup(self) -> None:
        self.policy = MLP(self.hidden_sizes, self.num_actions, 0.01)
        self.value = MLP(self.hidden_sizes, 1, 1.0)

    def __call__(self, observation: jnp.ndarray) -> tuple[jnp.ndarray, jnp.ndarray]:
        return self.policy(observation), self.value(observation)[:, 0]

    def logits(self, observation: jnp.ndarray) -> jnp.ndarray:
        """The policy head alone (what an actor needs)."""
        return self.policy(observation)


class GaussianActorCritic(nn.Module):
    """``observation -> ((mean [batch, D], log_std [D]), value [batch])``: a Gaussian policy with
    a state-independent, learned log standard deviation (starting at ``initial_log_std``), and a
    value function; two separate MLPs (as CleanRL's and SB3's PPO for continuous control)."""

    hidden_sizes: Sequence[int]
    action_size: int
    initial_log_std: float = 0.0

    def setup(self) -> None:
        self.policy = MLP(self.hidden_sizes, self.action_size, 0.01)
        self.value = MLP(self.hidden_sizes, 1, 1.0)
        self.log_std = self.param("log_std", nn.initializers.constant(self.initial_log_std), (self.action_size,))

    def __call__(self, observation: jnp.ndarray) -> tuple[tuple[jnp.ndarray, jnp.ndarray], jnp.ndarray]:
        return (self.policy(observation), self.log_std), self.value(observation)[:, 0]

    def logits(self, observation: jnp.ndarray) -> tuple[jnp.ndarray, jnp.ndarray]:
        """The policy head alone (what an actor needs): ``(mean, log_std)``."""
        return self.policy(observation), self.log_std


class PixelActorCritic(nn.Module):
    """``frames -> (logits [batch, num_actions], value [batch])``: a convolutional torso
    (``shoal.agents.torsos``) shared by a categorical policy head and a value head (as
    CleanRL's PPO for Atari and IMPALA do)."""

    torso: str
    num_actions: int

    def setup(self) -> None:
        self.features = make_torso(self.torso)
        self.policy = nn.Dense(self.num_actions, kernel_init=nn.initializers.orthogonal(0.01))
        self.value = nn.Dense(1, kernel_init=nn.initializers.orthogonal(1.0))

    def __call__(self, observation: jnp.ndarray) -> tuple[jnp.ndarray, jnp.ndarray]:
        features = self.features(observation)
        return self.policy(features), self.value(features)[:, 0]

    def logits(self, observation: jnp.ndarray) -> jnp.ndarray:
        return self.policy(self.features(observation))


class ActorCriticNetworks(NamedTuple):
    """An actor-critic and what it acts on: ``num_actions`` for a categorical policy, or
    ``None`` for a Gaussian one over ``action_size`` dimensions."""

    network: nn.Module
    observation_shape: tuple[int, ...]
    num_actions: int | None
    action_size: int = 0


def check_actor_critic_actions(spec: EnvironmentSpec, agent: str, continuous: bool = False) -> None:
    """Raises ``ValueError`` (naming ``agent`` and the space) for an action space its
    actor-critic cannot act in: continuous actions unless ``continuous``, and then only 1-d
    Box ones, and never with image observations. Builds nothing."""
    if spec.num_actions is not None:
        return
    if is_image(spec):
        raise ValueError(f"{agent} takes image observations with discrete actions only, got {spec.action_space}")
    if not continuous:
        raise ValueError(f"{agent} here takes a discrete action space, got {spec.action_space} "
                         "(for continuous actions use --agent ppo or sac)")
    if len(spec.action.shape) != 1:
        raise ValueError(f"{agent} takes a discrete or a 1-d continuous (Box) action space, got {spec.action_space}")


def make_actor_critic_networks(spec: EnvironmentSpec, hidden_sizes: Sequence[int], agent: str,
                               continuous: bool = False, initial_log_std: float = 0.0,
                               torso: str = "nature") -> ActorCriticNetworks:
    """The actor-critic of ``agent`` (named in the error): categorical for a discrete action
    space, Gaussian for a 1-d Box one where ``continuous`` is allowed; a convolutional ``torso``
    for image observations, MLPs of ``hidden_sizes`` for flat ones."""
    check_actor_critic_actions(spec, agent, continuous)
    if is_image(spec):
        return ActorCriticNetworks(PixelActorCritic(torso, spec.num_actions), spec.observation_shape,
                                   spec.num_actions)
    if spec.num_actions is not None:
        return ActorCriticNetworks(ActorCritic(tuple(hidden_sizes), spec.num_actions),
                                   spec.observation_shape, spec.num_actions)
    size = spec.action.shape[0]
    return ActorCriticNetworks(GaussianActorCritic(tuple(hidden_sizes), size, initial_log_std),
                               spec.observation_shape, None, size)
