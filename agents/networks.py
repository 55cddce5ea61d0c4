"""Network building blocks shared by agents (flax)."""

from __future__ import annotations

from typing import NamedTuple, Sequence

import flax.linen as nn
import jax.numpy as jnp
import numpy as np

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


class ActorCriticNetworks(NamedTuple):
    network: ActorCritic
    observation_shape: tuple[int, ...]
    num_actions: int


def make_actor_critic_networks(spec: EnvironmentSpec, hidden_sizes: Sequence[int],
                               agent: str) -> ActorCriticNetworks:
    """The ``ActorCritic`` of ``agent`` (named in the error) for a discrete action space."""
    if spec.num_actions is None:
        raise ValueError(f"{agent} here takes a discrete action space, got {spec.action_space} "
                         "(for continuous actions use --agent sac)")
    return ActorCriticNetworks(ActorCritic(tuple(hidden_sizes), spec.num_actions),
                               spec.observation_shape, spec.num_actions)
