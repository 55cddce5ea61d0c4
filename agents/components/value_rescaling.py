"""The invertible value rescaling of R2D2 (Kapturowski et al., 2019; from Pohlen et al., 2018).

Q-values are learned in a squashed space: the n-step target is ``h(r + gamma^n h^-1(Q'))``,
so returns of very different scales share one network without reward clipping.

    h(x)    = sign(x) (sqrt(|x| + 1) - 1) + eps x
    h^-1(x) = sign(x) (((sqrt(1 + 4 eps (|x| + 1 + eps)) - 1) / (2 eps))^2 - 1)

with ``eps = 1e-3``; ``h^-1(h(x)) = x`` for every real x (h is strictly increasing).
"""

from __future__ import annotations

import jax.numpy as jnp

EPSILON = 1e-3


def rescale(x: jnp.ndarray, eps: float = EPSILON) -> jnp.ndarray:
    """``h(x)``: squashes a value (see the module docstring)."""
    return jnp.sign(x) * (jnp.sqrt(jnp.abs(x) + 1.0) - 1.0) + eps * x


def unrescale(x: jnp.ndarray, eps: float = EPSILON) -> jnp.ndarray:
    """``h^-1(x)``: the value whose ``rescale`` is ``x``."""
    root = (jnp.sqrt(1.0 + 4.0 * eps * (jnp.abs(x) + 1.0 + eps)) - 1.0) / (2.0 * eps)
    return jnp.sign(x) * (root**2 - 1.0)
