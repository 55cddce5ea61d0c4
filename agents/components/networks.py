"""Network building blocks shared by agents (flax)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from shoal.agents.components.dict_observations import DictTorso, ObservationKeys, observation_keys
from shoal.agents.components.recurrent import RecurrentActorCritic
from shoal.agents.components.torsos import Torso, choose_torso, frame_scale, image_spec, is_image, make_torso
from shoal.core.specs import EnvironmentSpec, ObservationSpec
from shoal.envs.multiagent import GLOBAL_STATE

CRITIC_ONLY = (GLOBAL_STATE,)  # (observation keys only a value function reads)


ACTIVATIONS: dict[str, Callable[[jax.Array], jax.Array]] = {"tanh": nn.tanh, "relu": nn.relu}


def check_activation(activation: str) -> None:
    """Raises a one-line ``ValueError`` for an ``activation`` not in ``ACTIVATIONS``."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {', '.join(ACTIVATIONS)}, got {activation!r}")


class MLP(nn.Module):
    """``[batch, ...] -> [batch, output_size]``: hidden layers of ``activation`` (``tanh``, or
    ``relu``). With ``orthogonal_init`` (SB3's ``ortho_init``, CleanRL's ``layer_init``), orthogonal
    kernels with gain ``sqrt(2)`` and the output layer's gain ``output_scale`` (small for a policy
    head, so the initial policy is near uniform); without, flax's default (LeCun normal kernels)
    for every layer. Biases start at 0."""

    hidden_sizes: Sequence[int]
    output_size: int
    output_scale: float = 1.0
    activation: str = "tanh"
    orthogonal_init: bool = True

    @nn.compact
    def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
        x = x.reshape(x.shape[0], -1).astype(jnp.float32)
        act = ACTIVATIONS[self.activation]

        def init(gain: float) -> dict[str, Any]:
            return {"kernel_init": nn.initializers.orthogonal(gain)} if self.orthogonal_init else {}

        for size in self.hidden_sizes:
            x = act(nn.Dense(size, **init(np.sqrt(2)))(x))
        return nn.Dense(self.output_size, **init(self.output_scale))(x)


class ActorCritic(nn.Module):
    """``observation -> (logits [batch, num_actions], value [batch])``, two separate MLPs (the
    observation flattened and multiplied by ``scale`` first: frames read without a torso)."""

    hidden_sizes: Sequence[int]
    num_actions: int
    scale: float = 1.0
    activation: str = "tanh"
    orthogonal_init: bool = True

    def setup(self) -> None:
        self.policy = MLP(self.hidden_sizes, self.num_actions, 0.01, self.activation, self.orthogonal_init)
        self.value = MLP(self.hidden_sizes, 1, 1.0, self.activation, self.orthogonal_init)

    def __call__(self, observation: jnp.ndarray) -> tuple[jnp.ndarray, jnp.ndarray]:
        observation = self._scaled(observation)
        return self.policy(observation), self.value(observation)[:, 0]

    def logits(self, observation: jnp.ndarray) -> jnp.ndarray:
        """The policy head alone (what an actor needs)."""
        return self.policy(self._scaled(observation))

    def _scaled(self, observation: jnp.ndarray) -> jnp.ndarray:
        return observation if self.scale == 1.0 else observation.astype(jnp.float32) * self.scale


class GaussianActorCritic(nn.Module):
    """``observation -> ((mean [batch, D], log_std [D]), value [batch])``: a Gaussian policy with
    a state-independent, learned log standard deviation (starting at ``initial_log_std``), and a
    value function; two separate MLPs (as CleanRL's and SB3's PPO for continuous control)."""

    hidden_sizes: Sequence[int]
    action_size: int
    initial_log_std: float = 0.0
    activation: str = "tanh"
    orthogonal_init: bool = True

    def setup(self) -> None:
        self.policy = MLP(self.hidden_sizes, self.action_size, 0.01, self.activation, self.orthogonal_init)
        self.value = MLP(self.hidden_sizes, 1, 1.0, self.activation, self.orthogonal_init)
        self.log_std = self.param("log_std", nn.initializers.constant(self.initial_log_std), (self.action_size,))

    def __call__(self, observation: jnp.ndarray) -> tuple[tuple[jnp.ndarray, jnp.ndarray], jnp.ndarray]:
        return (self.policy(observation), self.log_std), self.value(observation)[:, 0]

    def logits(self, observation: jnp.ndarray) -> tuple[jnp.ndarray, jnp.ndarray]:
        """The policy head alone (what an actor needs): ``(mean, log_std)``."""
        return self.policy(observation), self.log_std


class PixelActorCritic(nn.Module):
    """``frames -> (logits [batch, num_actions], value [batch])``: a convolutional torso
    (``shoal.agents.components.torsos``) shared by a categorical policy head and a value head (as
    CleanRL's PPO for Atari and IMPALA do)."""

    torso: Torso
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


class DictActorCritic(nn.Module):
    """``{key: [batch, ...]} -> (policy output, value [batch])`` for a Dict observation: a torso
    per key (``shoal.agents.components.dict_observations.DictTorso``, tanh MLPs), then a categorical head
    (``num_actions``) or a Gaussian one (``action_size`` means and a state-independent log-std),
    and a value head. With image keys one torso is shared by both heads (as
    ``PixelActorCritic``), otherwise each head has its own (as ``ActorCritic``). Keys in
    ``CRITIC_ONLY`` (a multi-agent env's global state) are read by the value head alone: a
    centralised critic, the policy acting on the agent's own observation."""

    keys: ObservationKeys
    hidden_sizes: Sequence[int]
    num_actions: int | None
    action_size: int = 0
    initial_log_std: float = 0.0

    def setup(self) -> None:
        make = lambda keys: DictTorso(keys, tuple(self.hidden_sizes), "tanh")  # noqa: E731
        policy_keys = self.keys._replace(vectors=tuple(k for k in self.keys.vectors if k not in CRITIC_ONLY))
        self.features = make(policy_keys)
        self.value_features = None if self.keys.images and policy_keys == self.keys else make(self.keys)
        self.policy = nn.Dense(self.num_actions or self.action_size, kernel_init=nn.initializers.orthogonal(0.01))
        self.value = nn.Dense(1, kernel_init=nn.initializers.orthogonal(1.0))
        if self.num_actions is None:
            self.log_std = self.param("log_std", nn.initializers.constant(self.initial_log_std), (self.action_size,))

    def __call__(self, observation: Mapping[str, jax.Array]) -> tuple[Any, jax.Array]:
        features = self.features if self.value_features is None else self.value_features
        return self.logits(observation), self.value(features(observation))[:, 0]

    def logits(self, observation: Mapping[str, jax.Array]) -> jax.Array | tuple[jax.Array, jax.Array]:
        """The policy head alone: logits, or ``(mean, log_std)``."""
        out = self.policy(self.features(observation))
        return out if self.num_actions is not None else (out, self.log_std)


def check_critic_only(networks: Any, key: str, agent: str) -> None:
    """Raises a one-line ``ValueError`` unless every module of ``networks`` reads observation
    ``key`` in its value function only (``DictActorCritic``'s ``CRITIC_ONLY``)."""
    modules = [m for m in getattr(networks, "_asdict", lambda: {})().values() if isinstance(m, nn.Module)]
    if not modules or not all(isinstance(m, DictActorCritic) and key in CRITIC_ONLY for m in modules):
        kinds = ", ".join(type(m).__name__ for m in modules) or type(networks).__name__
        raise ValueError(
            f"--global-state feeds a centralised critic; {agent}'s networks ({kinds}) have none, and "
            "their policy would act on the global state. It takes a feed-forward actor-critic: ppo (MAPPO), "
            "impala"
        )


def has_convolutions(network: nn.Module) -> bool:
    """Whether an actor-critic runs convolutions (its SGD steps are then unrolled, ``shoal.learners.updates``)."""
    network = getattr(network, "inner", network)  # (a policy per group: shoal.agents.components.groups)
    keys = getattr(network, "keys", None)
    return (
        isinstance(network, PixelActorCritic)
        or getattr(network, "torso", None) is not None
        or (keys is not None and bool(keys.images))
    )


class ActorCriticNetworks(NamedTuple):
    """An actor-critic and what it acts on: ``num_actions`` for a categorical policy, or
    ``None`` for a Gaussian one over ``action_size`` dimensions. ``observation_shape`` is per key
    for a Dict observation, and ``observation`` the spec (shapes and dtypes) it was built for."""

    network: nn.Module
    observation_shape: tuple[int, ...] | dict[str, tuple[int, ...]]
    num_actions: int | None
    action_size: int = 0
    observation: ObservationSpec | None = None


def check_actor_critic_actions(spec: EnvironmentSpec, agent: str, continuous: bool = False) -> None:
    """Raises ``ValueError`` (naming ``agent`` and the space) for an action space its
    actor-critic cannot act in: continuous actions unless ``continuous``, and then only 1-d
    Box ones, and never with image observations. Builds nothing."""
    if spec.num_actions is not None:
        return
    if is_image(spec):
        raise ValueError(f"{agent} takes image observations with discrete actions only, got {spec.action_space}")
    if not continuous:
        raise ValueError(
            f"{agent} here takes a discrete action space, got {spec.action_space} "
            "(for continuous actions use --agent ppo or sac)"
        )
    if len(spec.action.shape) != 1:
        raise ValueError(f"{agent} takes a discrete or a 1-d continuous (Box) action space, got {spec.action_space}")


def make_actor_critic_networks(
    spec: EnvironmentSpec,
    hidden_sizes: Sequence[int],
    agent: str,
    continuous: bool = False,
    initial_log_std: float = 0.0,
    torso: str = "auto",
    lstm_size: int = 0,
    activation: str = "tanh",
    orthogonal_init: bool = True,
) -> ActorCriticNetworks:
    """The actor-critic of ``agent`` (named in the error): categorical for a discrete action
    space, Gaussian for a 1-d Box one where ``continuous`` is allowed; a convolutional ``torso``
    for image observations (``mlp``: none, the frames flattened into the MLPs, for a categorical
    policy), MLPs of ``hidden_sizes`` for flat ones (their hidden layers ``activation``, their
    init orthogonal or flax's default: ``orthogonal_init``), a torso per key for Dict ones.
    With ``lstm_size``, the torso feeds an LSTM that both heads read (``shoal.agents.components.recurrent``)."""
    check_actor_critic_actions(spec, agent, continuous)
    size = spec.action.shape[0] if spec.num_actions is None else 0
    observation, frames = spec.observation, image_spec(spec)
    if lstm_size:
        keys = (
            observation_keys(observation, torso, spec.observation_space) if isinstance(observation, Mapping) else None
        )
        chosen = choose_torso(torso, frames.shape, spec.observation_space) if frames is not None else None
        recurrent = RecurrentActorCritic(
            tuple(hidden_sizes), lstm_size, spec.num_actions, size, initial_log_std, chosen, keys
        )
        return ActorCriticNetworks(recurrent, spec.observation_shape, spec.num_actions, size, spec.observation)
    if isinstance(observation, Mapping):
        keys = observation_keys(observation, torso, spec.observation_space)
        network = DictActorCritic(keys, tuple(hidden_sizes), spec.num_actions, size, initial_log_std)
        return ActorCriticNetworks(network, spec.observation_shape, spec.num_actions, size, spec.observation)
    if frames is not None:
        # (check_actor_critic_actions took image observations with discrete actions only)
        num_actions = int(spec.num_actions or 0)
        if torso == "mlp":
            return ActorCriticNetworks(
                ActorCritic(
                    tuple(hidden_sizes), num_actions, frame_scale(spec.observation_space), activation, orthogonal_init
                ),
                spec.observation_shape,
                spec.num_actions,
            )
        chosen = choose_torso(torso, frames.shape, spec.observation_space)
        return ActorCriticNetworks(PixelActorCritic(chosen, num_actions), spec.observation_shape, spec.num_actions)
    if spec.num_actions is not None:
        return ActorCriticNetworks(
            ActorCritic(tuple(hidden_sizes), spec.num_actions, activation=activation, orthogonal_init=orthogonal_init),
            spec.observation_shape,
            spec.num_actions,
        )
    return ActorCriticNetworks(
        GaussianActorCritic(tuple(hidden_sizes), size, initial_log_std, activation, orthogonal_init),
        spec.observation_shape,
        None,
        size,
    )
