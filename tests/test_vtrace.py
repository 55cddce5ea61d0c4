"""Plain-JAX V-trace against hand-computed numbers and against rlax (where it is installed)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from shoal.agents.impala.vtrace import vtrace

# One sequence, T = 3: the episode ends at step 1 (discount 0: no trace or bootstrap crosses it,
# and v_t[1] = 3 must be ignored), a new one starts at step 2. rho_0 = 2 is above both clip
# thresholds, rho_2 = 1.2 above clip_rho = 1 but below clip_pg = 1.5.
V_TM1 = [0.5, 1.0, 2.0]
V_T = [1.0, 3.0, 4.0]
R_T = [1.0, 2.0, -1.0]
DISCOUNT_T = [0.9, 0.0, 0.9]
RHO_TM1 = [2.0, 0.5, 1.2]


def _run(**kwargs):
    arrays = (jnp.asarray(x, jnp.float32) for x in (V_TM1, V_T, R_T, DISCOUNT_T, RHO_TM1))
    out = vtrace(*arrays, **kwargs)
    return [np.asarray(x) for x in out]


def test_by_hand_lambda_one():
    errors, pg_advantage, targets = _run()
    # rho_bar = min(1, rho) = [1, 0.5, 1];  c = 1 * min(1, rho) = [1, 0.5, 1]
    # delta_0 = 1.0 * (1.0 + 0.9 * 1.0 - 0.5) = 1.4
    # delta_1 = 0.5 * (2.0 + 0.0 * 3.0 - 1.0) = 0.5
    # delta_2 = 1.0 * (-1.0 + 0.9 * 4.0 - 2.0) = 0.6
    # vs - v:  e_2 = 0.6;  e_1 = 0.5 + 0.0 * 0.5 * 0.6 = 0.5;  e_0 = 1.4 + 0.9 * 1 * 0.5 = 1.85
    np.testing.assert_allclose(errors, [1.85, 0.5, 0.6], rtol=1e-6)
    np.testing.assert_allclose(targets, [0.5 + 1.85, 1.0 + 0.5, 2.0 + 0.6], rtol=1e-6)
    # q_0 = 1.0 + 0.9 * vs_1 = 1.0 + 0.9 * 1.5 = 2.35;  q_1 = 2.0 + 0 = 2.0;  q_2 = -1 + 3.6 = 2.6
    # A = min(1, rho) * (q - v) = [1 * 1.85, 0.5 * 1.0, 1 * 0.6]
    np.testing.assert_allclose(pg_advantage, [1.85, 0.5, 0.6], rtol=1e-6)


def test_by_hand_lambda_half_and_separate_pg_clip():
    errors, pg_advantage, targets = _run(lambda_=0.5, clip_rho_threshold=1.0, clip_pg_rho_threshold=1.5)
    # deltas as above (clip_rho = 1): [1.4, 0.5, 0.6];  c = 0.5 * min(1, rho) = [0.5, 0.25, 0.5]
    # e_2 = 0.6;  e_1 = 0.5 + 0.0 * 0.25 * 0.6 = 0.5;  e_0 = 1.4 + 0.9 * 0.5 * 0.5 = 1.625
    np.testing.assert_allclose(errors, [1.625, 0.5, 0.6], rtol=1e-6)
    np.testing.assert_allclose(targets, [2.125, 1.5, 2.6], rtol=1e-6)
    # q_0 = 1.0 + 0.9 * (0.5 * vs_1 + 0.5 * v_1) = 1.0 + 0.9 * (0.75 + 0.5) = 2.125
    # q_1 = 2.0;  q_2 = -1.0 + 0.9 * 4.0 = 2.6;  min(1.5, rho) = [1.5, 0.5, 1.2]
    # A = [1.5 * (2.125 - 0.5), 0.5 * (2.0 - 1.0), 1.2 * (2.6 - 2.0)] = [2.4375, 0.5, 0.72]
    np.testing.assert_allclose(pg_advantage, [2.4375, 0.5, 0.72], rtol=1e-6)


def _random_inputs(seed, rows=8, length=20):
    rng = np.random.default_rng(seed)
    v_tm1, v_t, r_t = rng.normal(size=(3, rows, length))
    discount_t = 0.99 * (rng.uniform(size=(rows, length)) > 0.2)  # ~20% episode ends
    rho_tm1 = np.exp(rng.normal(scale=1.5, size=(rows, length)))  # ~0.01 .. ~100
    return [jnp.asarray(x, jnp.float32) for x in (v_tm1, v_t, r_t, discount_t, rho_tm1)]


def test_rows_are_independent_sequences():
    inputs = _random_inputs(0)
    batched = vtrace(*inputs, lambda_=0.9)
    for row in range(inputs[0].shape[0]):
        single = vtrace(*(x[row] for x in inputs), lambda_=0.9)
        for a, b in zip(batched, single):
            np.testing.assert_allclose(a[row], b, atol=1e-6)


def _rlax_vtrace(rlax, inputs, lambda_, clip_rho, clip_pg, stop):
    fn = lambda *xs: rlax.vtrace_td_error_and_advantage(  # noqa: E731
        *xs, lambda_, clip_rho, clip_pg, stop
    )
    return jax.vmap(fn)(*inputs)


HYPERS = [
    (1.0, 1.0, 1.0),
    (0.95, 1.0, 1.0),
    (0.5, 0.5, 2.0),
    (0.0, 2.0, 0.7),
    (1.0, 3.0, float("inf")),
    (np.linspace(0.2, 1.0, 20).astype(np.float32), 1.0, 1.0),
]


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("lambda_,clip_rho,clip_pg", HYPERS)
def test_matches_rlax(seed, lambda_, clip_rho, clip_pg):
    rlax = pytest.importorskip("rlax")
    inputs = _random_inputs(seed)
    lam = lambda_ if np.isscalar(lambda_) else jnp.asarray(lambda_)
    ours = vtrace(*inputs, lambda_=lam, clip_rho_threshold=clip_rho, clip_pg_rho_threshold=clip_pg)
    theirs = _rlax_vtrace(rlax, inputs, lam, clip_rho, clip_pg, True)
    for name in ("errors", "pg_advantage"):
        diff = float(jnp.max(jnp.abs(getattr(ours, name) - getattr(theirs, name))))
        print(
            f"max |ours - rlax| {name} lambda={np.mean(lambda_):.2f} "
            f"clip_rho={clip_rho} clip_pg={clip_pg} seed={seed}: {diff:.3g}"
        )
        assert diff < 1e-5


GRAD_KWARGS = dict(lambda_=0.9, clip_rho_threshold=1.0, clip_pg_rho_threshold=1.0)


def _value_loss_grads(inputs, fn):
    """Gradients of 0.5 * sum(errors**2) w.r.t. (v_tm1, v_t)."""
    loss = lambda v_tm1, v_t: 0.5 * jnp.sum(fn(v_tm1, v_t, *inputs[2:]).errors ** 2)  # noqa: E731
    return jax.jit(jax.grad(loss, argnums=(0, 1)))(inputs[0], inputs[1])


@pytest.mark.parametrize("stop", [True, False])
def test_jit_and_grad(stop):
    inputs = _random_inputs(3)
    kwargs = dict(GRAD_KWARGS, stop_target_gradients=stop)
    eager = vtrace(*inputs, **kwargs)
    jitted = jax.jit(lambda *xs: vtrace(*xs, **kwargs))(*inputs)
    for a, b in zip(eager, jitted):
        np.testing.assert_allclose(a, b, atol=1e-6)
    grad_v_tm1, grad_v_t = _value_loss_grads(inputs, lambda *xs: vtrace(*xs, **kwargs))
    if stop:  # targets are constants: d/dv_tm1 of 0.5 (vs - v)^2 is -(vs - v); no path to v_t
        np.testing.assert_allclose(grad_v_tm1, -eager.errors, atol=1e-6)
        np.testing.assert_array_equal(grad_v_t, np.zeros_like(grad_v_t))
    else:  # gradients flow through the targets into the bootstrap values
        assert float(jnp.max(jnp.abs(grad_v_t))) > 0.0


@pytest.mark.parametrize("stop", [True, False])
def test_grad_matches_rlax(stop):
    rlax = pytest.importorskip("rlax")
    inputs = _random_inputs(3)
    ours = _value_loss_grads(inputs, lambda *xs: vtrace(*xs, **GRAD_KWARGS, stop_target_gradients=stop))
    theirs = _value_loss_grads(inputs, lambda *xs: _rlax_vtrace(rlax, xs, *GRAD_KWARGS.values(), stop))
    for a, b, name in zip(ours, theirs, ("v_tm1", "v_t")):
        diff = float(jnp.max(jnp.abs(a - b)))
        print(f"max |grad ours - grad rlax| w.r.t. {name}, stop={stop}: {diff:.3g}")
        assert diff < 1e-5
