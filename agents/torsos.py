"""Convolutional torsos for image observations: ``[batch, stack, height, width]`` uint8 frames
(what the Atari preprocessing gives: a stack of 4 grayscale 84x84 frames) -> features.

Frames stay uint8 from the env to the learner's device; they are scaled to [0, 1] here, inside
the network. The torso is chosen from the observation spec (``is_image``): rank-3 uint8
observations get one of these, flat ones an MLP.

* ``nature`` -- the Nature DQN network (Mnih et al., 2015): conv 32 8x8 stride 4, conv 64 4x4
  stride 2, conv 64 3x3 stride 1, dense 512, ReLUs;
* ``impala`` -- the IMPALA ResNet (Espeholt et al., 2018): three stages of (conv 3x3, max-pool
  3x3 stride 2, two residual blocks of two 3x3 convs) with 16, 32, 32 channels, then dense 256.
"""

from __future__ import annotations

from typing import Sequence

import flax.linen as nn
import jax.numpy as jnp
import numpy as np

from shoal.core.specs import EnvironmentSpec

TORSOS = ("nature", "impala")


def is_image(spec: EnvironmentSpec) -> bool:
    """Whether observations are stacks of frames: rank 3, uint8 (a Dict observation is not: its
    image keys are, ``shoal.agents.observations``)."""
    return (not spec.dict_observations and len(spec.observation_shape) == 3
            and spec.observation.dtype == np.uint8)


def _frames(observation: jnp.ndarray) -> jnp.ndarray:
    """``[B, C, H, W]`` uint8 -> ``[B, H, W, C]`` floats in [0, 1] (channels last, for ``nn.Conv``)."""
    return jnp.transpose(observation.astype(jnp.float32) / 255.0, (0, 2, 3, 1))


def _orthogonal(scale: float = np.sqrt(2)):
    return nn.initializers.orthogonal(scale)


class NatureCNN(nn.Module):
    @nn.compact
    def __call__(self, observation: jnp.ndarray) -> jnp.ndarray:
        x = _frames(observation)
        for features, kernel, stride in ((32, 8, 4), (64, 4, 2), (64, 3, 1)):
            x = nn.relu(nn.Conv(features, (kernel, kernel), (stride, stride), padding="VALID",
                                kernel_init=_orthogonal())(x))
        return nn.relu(nn.Dense(512, kernel_init=_orthogonal())(x.reshape(x.shape[0], -1)))


class _ResidualBlock(nn.Module):
    channels: int

    @nn.compact
    def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
        y = nn.Conv(self.channels, (3, 3), padding="SAME")(nn.relu(x))
        y = nn.Conv(self.channels, (3, 3), padding="SAME")(nn.relu(y))
        return x + y


class ImpalaResNet(nn.Module):
    channels: Sequence[int] = (16, 32, 32)

    @nn.compact
    def __call__(self, observation: jnp.ndarray) -> jnp.ndarray:
        x = _frames(observation)
        for channels in self.channels:
            x = nn.Conv(channels, (3, 3), padding="SAME")(x)
            x = nn.max_pool(x, (3, 3), strides=(2, 2), padding="SAME")
            x = _ResidualBlock(channels)(x)
            x = _ResidualBlock(channels)(x)
        x = nn.relu(x).reshape(x.shape[0], -1)
        return nn.relu(nn.Dense(256, kernel_init=_orthogonal())(x))


def check_torso(kind: str) -> None:
    if kind not in TORSOS:
        raise ValueError(f"torso must be one of {', '.join(TORSOS)}, got {kind!r}")


def make_torso(kind: str, name: str | None = None) -> nn.Module:
    check_torso(kind)
    return NatureCNN(name=name) if kind == "nature" else ImpalaResNet(name=name)
