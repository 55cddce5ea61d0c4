"""V-trace (Espeholt et al., 2018): off-policy value targets and policy-gradient advantages.

One sequence of T steps, time on the last axis (argument names as in rlax, so it drops in for
``rlax.vtrace_td_error_and_advantage``): ``v_tm1[t] = V(x_t)``, ``v_t[t]`` is the value of the
state after step t (the bootstrap), ``r_t[t]``, ``discount_t[t]`` (0 at an episode end) and
``rho_tm1[t] = pi(a_t|x_t) / mu(a_t|x_t)``. With the clipped ratios

    rho_bar_t = min(clip_rho_threshold, rho_t)         weight of the TD error at step t
    c_t       = lambda_t * min(1, rho_t)               how far the trace runs past step t

the TD errors and the value targets, computed backwards from vs_T - V(x_T) = 0, are

    delta_t        = rho_bar_t * (r_t + discount_t * v_t[t] - V(x_t))
    vs_t - V(x_t)  = delta_t + discount_t * c_t * (vs_{t+1} - V(x_{t+1}))

and the policy-gradient advantages bootstrap from the next target (mixed with V by lambda):

    q_t = r_t + discount_t * (lambda_t * vs_{t+1} + (1 - lambda_t) * V(x_{t+1}))    t < T - 1
    q_t = r_t + discount_t * v_t[T-1]                                                t = T - 1
    A_t = min(clip_pg_rho_threshold, rho_t) * (q_t - V(x_t))

With ``stop_target_gradients`` the targets vs are constants, so ``errors = vs - V(x)`` only
carries gradient through ``-V(x_t)``. The advantages are not stopped: callers stop them.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp

Array = jax.Array


class VTraceOutput(NamedTuple):
    errors: Array  # vs_t - V(x_t): regress V towards vs with 0.5 * errors**2
    pg_advantage: Array  # A_t: multiplies log pi(a_t|x_t) in the policy gradient
    targets: Array  # vs_t, the V-trace value targets


def vtrace(
    v_tm1: Array,
    v_t: Array,
    r_t: Array,
    discount_t: Array,
    rho_tm1: Array,
    lambda_: float | Array = 1.0,
    clip_rho_threshold: float = 1.0,
    clip_pg_rho_threshold: float = 1.0,
    stop_target_gradients: bool = True,
) -> VTraceOutput:
    """V-trace errors, pg advantages and targets (module docstring) for ``[..., T]`` sequences.

    The five arrays share a shape ``[T]`` (one sequence) or ``[rows, T]`` (any leading axes:
    each row is its own sequence); ``lambda_`` is a scalar or broadcasts to that shape.
    ``stop_target_gradients`` is a Python bool (static under ``jax.jit``).
    """
    lambda_ = jnp.ones_like(discount_t) * lambda_
    c = lambda_ * jnp.minimum(1.0, rho_tm1)
    delta = jnp.minimum(clip_rho_threshold, rho_tm1) * (r_t + discount_t * v_t - v_tm1)

    def step(
        acc: Array, xs: tuple[Array, Array, Array]
    ) -> tuple[Array, Array]:  # acc = vs_{t+1} - V(x_{t+1}), one entry per row
        delta_t, discount, c_t = xs
        acc = delta_t + discount * c_t * acc
        return acc, acc

    time_first = lambda x: jnp.moveaxis(x, -1, 0)  # noqa: E731  scan runs over the leading axis
    _, acc = jax.lax.scan(
        step, jnp.zeros_like(delta[..., 0]), (time_first(delta), time_first(discount_t), time_first(c)), reverse=True
    )
    vs = v_tm1 + jnp.moveaxis(acc, 0, -1)
    if stop_target_gradients:
        vs = jax.lax.stop_gradient(vs)

    next_target = lambda_[..., :-1] * vs[..., 1:] + (1.0 - lambda_[..., :-1]) * v_tm1[..., 1:]
    q = r_t + discount_t * jnp.concatenate([next_target, v_t[..., -1:]], axis=-1)
    pg_advantage = jnp.minimum(clip_pg_rho_threshold, rho_tm1) * (q - v_tm1)
    return VTraceOutput(errors=vs - v_tm1, pg_advantage=pg_advantage, targets=vs)
