"""Convolutional torsos for image observations: ``[batch, channels, height, width]`` uint8 frames
(what the Atari preprocessing gives: a stack of 4 grayscale 84x84 frames; MinAtar's 10x10
binary planes, ``shoal.envs.observations``) -> features.

Frames stay uint8 from the env to the learner's device; they are scaled to [0, 1] here, inside
the network (by ``1 / high``, the observation space's upper bound: 255 for Atari's frames, 1
for MinAtar's planes). The torso is chosen from the observation spec (``is_image``): rank-3
uint8 observations get one of these, flat ones an MLP.

* ``nature`` -- the Nature DQN network (Mnih et al., 2015): conv 32 8x8 stride 4, conv 64 4x4
  stride 2, conv 64 3x3 stride 1, dense 512, ReLUs (frames of at least 36x36);
* ``impala`` -- the IMPALA ResNet (Espeholt et al., 2018): three stages of (conv 3x3, max-pool
  3x3 stride 2, two residual blocks of two 3x3 convs) with 16, 32, 32 channels, then dense 256;
* ``minatar`` -- the MinAtar network (Young & Tian, 2019): conv 16 3x3 stride 1, dense 128,
  ReLUs (for small images, e.g. MinAtar's 10x10);
* ``auto`` (the agents' default) -- ``nature`` for frames of at least 36x36, else ``minatar``;
* ``mlp`` (PPO and DQN) -- no convolution: the frames, scaled and flattened, go into the MLPs of
  ``hidden_sizes`` (PPO's policy and value MLPs: gymnax-blines' MinAtar network).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import flax.linen as nn
import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np

from shoal.core.specs import ArraySpec, EnvironmentSpec

TORSOS = ("auto", "nature", "impala", "minatar")
NATURE_MIN_SIZE = 36  # (the smallest frame the Nature network's three VALID convolutions take)


class Torso(NamedTuple):
    """A torso as a network holds it: its ``kind`` (not ``auto``) and the ``scale`` that brings
    its uint8 frames to [0, 1]."""

    kind: str
    scale: float


def is_image_array(spec: ArraySpec) -> bool:
    """Whether one array is a stack of frames: rank 3, uint8."""
    return len(spec.shape) == 3 and spec.dtype == np.uint8


def is_image(spec: EnvironmentSpec) -> bool:
    """Whether observations are stacks of frames (a Dict observation is not: its image keys
    are, ``shoal.agents.components.dict_observations``)."""
    return image_spec(spec) is not None


def image_spec(spec: EnvironmentSpec) -> ArraySpec | None:
    """The spec of one stack of frames where observations are such stacks (``is_image``), else ``None``."""
    observation = spec.observation
    return observation if isinstance(observation, ArraySpec) and is_image_array(observation) else None


def choose_torso(kind: str, shape: tuple[int, ...], space: gym.Space | None = None) -> Torso:
    """The torso for frames of ``shape`` ``[C, H, W]`` (``space``: their Box, whose upper bound
    sets the scale; 255 without one). ``auto`` picks by size (module docstring); ``nature`` on
    frames under 36x36 is one ``ValueError``."""
    check_torso(kind)
    small = min(shape[1:]) < NATURE_MIN_SIZE
    if kind == "auto":
        kind = "minatar" if small else "nature"
    elif kind == "nature" and small:
        raise ValueError(
            f"torso 'nature' takes frames of at least {NATURE_MIN_SIZE}x{NATURE_MIN_SIZE}, "
            f"got {shape[1]}x{shape[2]}; use torso=minatar (or auto) for small images"
        )
    return Torso(kind, frame_scale(space))


def frame_scale(space: gym.Space | None) -> float:
    """The factor that brings frames of ``space`` (a Box; 255 without one) to [0, 1]."""
    high = float(np.max(space.high)) if isinstance(space, gym.spaces.Box) else 255.0
    return 1.0 / high if high > 0 else 1.0


def _frames(observation: jnp.ndarray, scale: float) -> jnp.ndarray:
    """``[B, C, H, W]`` uint8 -> ``[B, H, W, C]`` floats in [0, 1] (channels last, for ``nn.Conv``)."""
    return jnp.transpose(observation.astype(jnp.float32) * scale, (0, 2, 3, 1))


def _orthogonal(scale: float = np.sqrt(2)) -> nn.initializers.Initializer:
    return nn.initializers.orthogonal(scale)


class NatureCNN(nn.Module):
    """The Nature DQN network. Its first convolution (8x8, stride 4, over 4 channels) is computed
    as a 2x2 stride-1 convolution over 4x4 blocks of pixels folded into 64 channels (space to
    depth; the same function of the same ``Conv_0`` kernel): XLA's CPU convolution runs the
    folded form 2.6x faster (batch 8: 1.9 ms against 4.8 ms on 2 cores; gradients alike)."""

    scale: float = 1.0 / 255.0

    @nn.compact
    def __call__(self, observation: jnp.ndarray) -> jnp.ndarray:
        x = nn.relu(_StridedConv(32, 8, 4, name="Conv_0")(observation.astype(jnp.float32) * self.scale))
        for i, (features, kernel, stride) in enumerate(((64, 4, 2), (64, 3, 1)), start=1):
            x = nn.relu(
                nn.Conv(
                    features,
                    (kernel, kernel),
                    (stride, stride),
                    padding="VALID",
                    kernel_init=_orthogonal(),
                    name=f"Conv_{i}",
                )(x)
            )
        return nn.relu(nn.Dense(512, kernel_init=_orthogonal(), name="Dense_0")(x.reshape(x.shape[0], -1)))


class _StridedConv(nn.Module):
    """``nn.Conv(features, (kernel, kernel), (stride, stride), padding="VALID")`` (its params:
    ``kernel [k, k, C, features]``, ``bias``) on channels-first ``[B, C, H, W]`` input, giving
    ``[B, H', W', features]``, computed by space to depth (``kernel`` a multiple of ``stride``):
    ``stride x stride`` blocks become channels, and the kernel a ``kernel/stride`` square one."""

    features: int
    kernel: int
    stride: int

    @nn.compact
    def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
        n, c, h, w = x.shape
        k, s = self.kernel, self.stride
        kernel = self.param("kernel", _orthogonal(), (k, k, c, self.features))
        bias = self.param("bias", nn.initializers.zeros, (self.features,))
        m, out_h, out_w = k // s, (h - k) // s + 1, (w - k) // s + 1
        rows, cols = out_h + m - 1, out_w + m - 1  # (blocks the output reads: rows * s <= h)
        x = x[:, :, : rows * s, : cols * s].reshape(n, c, rows, s, cols, s)
        x = x.transpose(0, 2, 4, 3, 5, 1).reshape(n, rows, cols, s * s * c)  # [B, rows, cols, (dy, dx, C)]
        folded = kernel.reshape(m, s, m, s, c, self.features).transpose(0, 2, 1, 3, 4, 5)
        y = jax.lax.conv_general_dilated(
            x,
            folded.reshape(m, m, s * s * c, self.features),
            (1, 1),
            "VALID",
            dimension_numbers=("NHWC", "HWIO", "NHWC"),
        )
        return y + bias


class _ResidualBlock(nn.Module):
    channels: int

    @nn.compact
    def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
        y = nn.Conv(self.channels, (3, 3), padding="SAME")(nn.relu(x))
        y = nn.Conv(self.channels, (3, 3), padding="SAME")(nn.relu(y))
        return x + y


class ImpalaResNet(nn.Module):
    channels: Sequence[int] = (16, 32, 32)
    scale: float = 1.0 / 255.0

    @nn.compact
    def __call__(self, observation: jnp.ndarray) -> jnp.ndarray:
        x = _frames(observation, self.scale)
        for channels in self.channels:
            x = nn.Conv(channels, (3, 3), padding="SAME")(x)
            x = nn.max_pool(x, (3, 3), strides=(2, 2), padding="SAME")
            x = _ResidualBlock(channels)(x)
            x = _ResidualBlock(channels)(x)
        x = nn.relu(x).reshape(x.shape[0], -1)
        return nn.relu(nn.Dense(256, kernel_init=_orthogonal())(x))


class MinAtarCNN(nn.Module):
    """conv 16 3x3 stride 1 (VALID), dense 128, ReLUs. The convolution is computed as one matmul
    over the frames' 3x3 patches (the same function: a weight per patch entry and filter), which
    XLA runs about 3x faster on a CPU than its convolution at this size (10x10 frames, batch 32:
    0.85 ms an SGD step against 2.9 ms)."""

    scale: float = 1.0

    @nn.compact
    def __call__(self, observation: jnp.ndarray) -> jnp.ndarray:
        x = _frames(observation, self.scale)
        h, w = x.shape[1] - 2, x.shape[2] - 2
        patches = jnp.concatenate([x[:, i : i + h, j : j + w, :] for i in range(3) for j in range(3)], axis=-1)
        x = nn.relu(nn.Dense(16, kernel_init=_orthogonal(), name="conv")(patches))
        return nn.relu(nn.Dense(128, kernel_init=_orthogonal())(x.reshape(x.shape[0], -1)))


def check_torso(kind: str, also: tuple[str, ...] = (), spec: EnvironmentSpec | None = None) -> None:
    """Raises ``ValueError`` unless ``kind`` is one of ``TORSOS`` or of ``also`` (an agent's own),
    and, given the env's ``spec``, for a convolutional torso named where the observations are not
    frames (nor a Dict, whose image keys take it): one line, not an MLP in its place."""
    if kind not in TORSOS + also:
        raise ValueError(f"torso must be one of {', '.join(TORSOS + also)}, got {kind!r}")
    observation = None if spec is None else spec.observation
    if kind in TORSOS[1:] and isinstance(observation, ArraySpec) and not is_image_array(observation):
        raise ValueError(
            f"torso={kind} reads image observations (rank-3 uint8 frames [C, H, W]); this env's are "
            f"{np.dtype(observation.dtype).name} {tuple(observation.shape)}: use torso=auto (an MLP of hidden_sizes)"
        )


def make_torso(torso: Torso, name: str | None = None) -> nn.Module:
    """The module of a chosen torso (``choose_torso``)."""
    kinds = {"nature": NatureCNN, "impala": ImpalaResNet, "minatar": MinAtarCNN}
    if torso.kind not in kinds:
        raise ValueError(f"torso must be one of {', '.join(kinds)} once chosen, got {torso.kind!r}")
    return kinds[torso.kind](scale=torso.scale, name=name)
