"""What agents do with Dict observations and action masks (``shoal.core.specs``).

**A torso per key** (``DictTorso``): for a Dict observation, every rank-3 uint8 key (a stack of
frames) goes through a convolutional torso (``shoal.agents.components.torsos``, chosen per key: ``auto``
picks by the frames' size),
every other key, flattened to float32, through an MLP of the agent's ``hidden_sizes``; their
features are concatenated, and the agent's heads read them. The ``action_mask`` key is not an
input: it only restricts the actions.

**Masks.** An ``action_mask`` ``[batch, num_actions]`` (non-zero: allowed) restricts a
categorical policy to the allowed actions by setting the logits of the others to
``MASKED_LOGIT`` (``-1e9``: finite, so no ``inf - inf``); the softmax then renormalises over the
allowed set, and the log-probabilities and the entropy are those of the allowed actions alone
(a masked action's probability is exactly 0 in float32, its term ``0 * log 0`` is 0). A Q
network's greedy action and its targets' max are taken over the allowed actions in the same way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import flax.linen as nn
import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np

from shoal.agents.components.torsos import Torso, choose_torso, is_image_array, make_torso
from shoal.core.specs import ACTION_MASK, ArraySpec

MASKED_LOGIT = -1e9


class ObservationKeys(NamedTuple):
    """The keys of a Dict observation, by what reads them: ``images`` (rank-3 uint8: a
    convolutional torso each, ``image_torsos``), ``vectors`` (an MLP each). The
    ``action_mask`` is in neither."""

    images: tuple[str, ...]
    vectors: tuple[str, ...]
    image_torsos: tuple[Torso, ...] = ()


def observation_keys(
    observation: Mapping[str, ArraySpec], torso: str = "auto", space: gym.Space | None = None
) -> ObservationKeys:
    """The keys of a Dict observation's spec, sorted, by what reads them; each image key's torso
    chosen (``shoal.agents.components.torsos.choose_torso``) as ``torso`` says, scaled by ``space``'s bound."""
    inputs = sorted(key for key in observation if key != ACTION_MASK)
    images = tuple(key for key in inputs if is_image_array(observation[key]))
    spaces = space.spaces if isinstance(space, gym.spaces.Dict) else {}
    torsos = tuple(choose_torso(torso, observation[key].shape, spaces.get(key)) for key in images)
    return ObservationKeys(images, tuple(key for key in inputs if key not in images), torsos)


def normalized_keys(observation: Mapping[str, ArraySpec]) -> tuple[str, ...]:
    """The keys running observation normalization applies to: float vectors (rank 1)."""
    return tuple(
        sorted(
            key
            for key, spec in observation.items()
            if key != ACTION_MASK and len(spec.shape) == 1 and np.issubdtype(spec.dtype, np.floating)
        )
    )


def example_observation(observation_shape: tuple[int, ...] | Mapping[str, tuple[int, ...]]) -> Any:
    """float32 zeros of one observation, batch of 1 (a dict of them for a Dict observation):
    what networks are initialized with."""
    if isinstance(observation_shape, Mapping):
        return {key: jnp.zeros((1, *shape), jnp.float32) for key, shape in observation_shape.items()}
    return jnp.zeros((1, *observation_shape), jnp.float32)


def action_mask(observation: Any) -> jax.Array | None:
    """The boolean ``[batch, num_actions]`` mask of a batch of observations (``True``: allowed),
    or ``None`` where the observation holds none (known when tracing: no cost unmasked)."""
    if isinstance(observation, Mapping) and ACTION_MASK in observation:
        return observation[ACTION_MASK] != 0
    return None


def mask_logits(logits: jax.Array, mask: jax.Array | None) -> jax.Array:
    """``logits`` with the masked actions' set to ``MASKED_LOGIT`` (``mask`` ``None``: as they are)."""
    if mask is None:
        return logits
    return jnp.where(mask, logits, MASKED_LOGIT)


class DictTorso(nn.Module):
    """``{key: [batch, ...]} -> [batch, features]``: a convolutional torso per image key
    (``keys.image_torsos``) and an MLP of ``hidden_sizes`` (``activation`` ``relu`` or ``tanh``,
    orthogonal init with gain ``sqrt(2)``) per vector key, concatenated (module docstring)."""

    keys: ObservationKeys
    hidden_sizes: Sequence[int]
    activation: str = "relu"

    @nn.compact
    def __call__(self, observation: Mapping[str, jax.Array]) -> jax.Array:
        act = nn.relu if self.activation == "relu" else nn.tanh
        features = [
            make_torso(torso, name=f"image_{i}")(observation[key])
            for i, (key, torso) in enumerate(zip(self.keys.images, self.keys.image_torsos, strict=True))
        ]
        for i, key in enumerate(self.keys.vectors):
            x = observation[key]
            x = x.reshape(x.shape[0], -1).astype(jnp.float32)
            for j, size in enumerate(self.hidden_sizes):
                x = act(nn.Dense(size, kernel_init=nn.initializers.orthogonal(np.sqrt(2)), name=f"vector_{i}_{j}")(x))
            features.append(x)
        return jnp.concatenate(features, axis=-1)
