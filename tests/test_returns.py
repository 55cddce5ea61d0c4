"""GAE and V-trace against hand-computed numbers, the tanh-Gaussian and Gaussian densities, the
running statistics of observation and reward normalization, and the discounted returns actors
record for the latter."""

import math

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from shoal.agents.components import distributions, normalization
from shoal.agents.impala.config import IMPALAConfig
from shoal.agents.impala.learning import vtrace_targets
from shoal.agents.ppo.learning import gae
from shoal.agents.sac.networks import make_networks, squash, tanh_gaussian_log_prob
from shoal.core.specs import make_environment_spec

# Row 0: step 1 terminates (its next value must be ignored), step 2 is truncated (bootstrap from
# its final observation's value). Row 1: no episode end, next values chain into the next step.
REWARD = np.array([[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]], np.float32)
VALUE = np.array([[10.0, 20.0, 30.0], [10.0, 20.0, 30.0]], np.float32)
NEXT_VALUE = np.array([[20.0, 99.0, 7.0], [20.0, 30.0, 7.0]], np.float32)
TERMINATED = np.array([[0, 1, 0], [0, 0, 0]], np.float32)
TRUNCATED = np.array([[0, 0, 1], [0, 0, 0]], np.float32)


def test_gae_by_hand():
    # gamma = 0.5, lambda = 0.5: delta_t = r + 0.5 (1 - term) v' - v, A_t = delta_t + 0.25 (1 - done) A_{t+1}
    advantages = np.asarray(gae(REWARD, TERMINATED, TRUNCATED, VALUE, NEXT_VALUE, 0.5, 0.5))
    # row 0: deltas 1, -18, 3 + 3.5 - 30 = -23.5; A2 = -23.5, A1 = -18 (terminated: cut), A0 = 1 - 4.5
    np.testing.assert_allclose(advantages[0], [-3.5, -18.0, -23.5])
    # row 1: deltas 1, 2 + 15 - 20 = -3, -23.5; A2 = -23.5, A1 = -3 - 5.875, A0 = 1 + 0.25 A1
    np.testing.assert_allclose(advantages[1], [1.0 - 0.25 * 8.875, -8.875, -23.5])


def test_vtrace_by_hand():
    # gamma = 0.5, lambda = 1, rho-bar = pg rho-bar = 1; rho = [2, 0.5, 1] -> clipped [1, 0.5, 1],
    # traces c = min(1, rho) = [1, 0.5, 1].
    rho = np.array([[2.0, 0.5, 1.0]] * 2, np.float32)
    config = IMPALAConfig(discount=0.5, vtrace_lambda=1.0)
    errors, pg = vtrace_targets(
        jnp.asarray(VALUE),
        jnp.asarray(NEXT_VALUE),
        jnp.asarray(REWARD),
        jnp.asarray(TERMINATED),
        jnp.asarray(TRUNCATED),
        jnp.asarray(rho),
        config,
    )
    # row 0: deltas 1*(1 + 10 - 10) = 1, 0.5*(2 - 20) = -9, 1*(3 + 3.5 - 30) = -23.5;
    # e2 = -23.5, e1 = -9 (terminated: no trace), e0 = 1 + 0.5*1*(-9) = -3.5
    np.testing.assert_allclose(errors[0], [-3.5, -9.0, -23.5])
    # pg: q0 = 1 + 0.5 vs1 (vs1 = 11) = 6.5; q1 = 2 (terminated); q2 = 3 + 0.5*7 (truncated)
    np.testing.assert_allclose(pg[0], [6.5 - 10.0, 0.5 * (2.0 - 20.0), 6.5 - 30.0])
    # row 1: deltas 1, 0.5*(2 + 15 - 20) = -1.5, -23.5; e1 = -1.5 + 0.5*0.5*(-23.5), e0 = 1 + 0.5 e1
    e1 = -1.5 + 0.25 * -23.5
    np.testing.assert_allclose(errors[1], [1.0 + 0.5 * e1, e1, -23.5])
    vs1, vs2 = 20.0 + e1, 30.0 - 23.5
    np.testing.assert_allclose(pg[1], [1.0 + 0.5 * vs1 - 10.0, 0.5 * (2.0 + 0.5 * vs2 - 20.0), 6.5 - 30.0], rtol=1e-6)


@pytest.fixture(scope="module")
def networks():
    class Box2(gym.Env):  # actions in [-2, 2] x [0, 1]: scale (2, 0.5), offset (0, 0.5)
        observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
        action_space = gym.spaces.Box(np.array([-2.0, 0.0], np.float32), np.array([2.0, 1.0], np.float32))

    return make_networks(make_environment_spec(Box2()), (8,))


def test_tanh_gaussian_log_prob_matches_change_of_variables(networks):
    rng = np.random.default_rng(0)
    u, mean = rng.normal(size=(64, 2)).astype(np.float32), rng.normal(size=(64, 2)).astype(np.float32)
    log_std = rng.uniform(-1.0, 0.5, (64, 2)).astype(np.float32)
    ours = np.asarray(tanh_gaussian_log_prob(networks, u, mean, log_std))
    # log p(a) = log N(u) - log |da/du|, the Jacobian by central differences of the squash
    h = 1e-3
    jacobian = (np.asarray(squash(networks, u + h)) - np.asarray(squash(networks, u - h))) / (2 * h)
    std = np.exp(log_std)
    log_normal = -0.5 * ((u - mean) / std) ** 2 - np.log(std) - 0.5 * np.log(2 * np.pi)
    expected = np.sum(log_normal - np.log(jacobian), axis=-1)
    np.testing.assert_allclose(ours, expected, rtol=2e-3, atol=2e-3)


def test_tanh_gaussian_density_integrates_to_one():
    class Box1(gym.Env):  # actions in [0, 1]
        observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
        action_space = gym.spaces.Box(0.0, 1.0, (1,), np.float32)

    networks = make_networks(make_environment_spec(Box1()), (8,))
    a = np.linspace(0.0, 1.0, 200_001)[1:-1]
    u = np.arctanh((a - networks.action_offset) / networks.action_scale).astype(np.float32)[:, None]
    density = np.exp(np.asarray(tanh_gaussian_log_prob(networks, u, np.full_like(u, 0.3), np.full_like(u, -0.2))))
    assert abs(np.sum(density) * (a[1] - a[0]) - 1.0) < 1e-3


def test_gaussian_log_prob_and_entropy_by_hand():
    mean, log_std, action = jnp.array([[0.0, 1.0]]), jnp.array([0.0, math.log(2.0)]), jnp.array([[1.0, 0.0]])
    # dim 0: N(1; 0, 1) -> -0.5 - 0.5 log 2pi; dim 1: N(0; 1, 2) -> -0.5 (1/2)^2 - log 2 - 0.5 log 2pi
    expected = (-0.5 - 0.5 * math.log(2 * math.pi)) + (-0.125 - math.log(2.0) - 0.5 * math.log(2 * math.pi))
    np.testing.assert_allclose(distributions.gaussian_log_prob(mean, log_std, action), [expected], rtol=1e-6)
    # H = sum_d log sigma_d + 0.5 (1 + log 2pi) = log 2 + 1 + log 2pi
    np.testing.assert_allclose(
        distributions.gaussian_entropy(mean, log_std), [math.log(2.0) + 1.0 + math.log(2 * math.pi)], rtol=1e-6
    )
    samples = distributions.gaussian_sample(jax.random.PRNGKey(0), jnp.zeros((200_000, 2)) + mean, log_std)
    np.testing.assert_allclose(np.std(samples, axis=0), [1.0, 2.0], rtol=0.02)  # sigma = exp(log_std)


def test_running_statistics_merge_by_hand():
    stats = {"count": jnp.float32(2.0), "mean": jnp.array([1.0]), "var": jnp.array([1.0])}  # e.g. from {0, 2}
    batch = jnp.array([[4.0], [6.0], [8.0]])  # mean 6, population variance 8/3
    merged = normalization.update(stats, batch)
    # all five values {0, 2, 4, 6, 8}: mean 4, population variance (16 + 4 + 0 + 4 + 16) / 5 = 8
    np.testing.assert_allclose(
        [float(merged["count"]), float(merged["mean"][0]), float(merged["var"][0])], [5.0, 4.0, 8.0], rtol=1e-6
    )
    np.testing.assert_allclose(
        normalization.normalize(merged, jnp.array([6.0])), [2.0 / math.sqrt(8.0 + 1e-8)], rtol=1e-6
    )
    np.testing.assert_allclose(normalization.scale(merged, jnp.array([-4.0])), [-4.0 / math.sqrt(8.0)], rtol=1e-6)


def test_discounted_returns_restart_after_an_episode_ends():
    from shoal.core.types import Step

    seen = []

    class Collect:
        def add(self, step):
            seen.append(step.extras["discounted_return"].copy())

    adder = normalization.DiscountedReturns(Collect(), num_envs=2, discount=0.5)
    for reward, done in (([1.0, 2.0], [False, True]), ([1.0, 2.0], [False, False]), ([1.0, 2.0], [True, False])):
        z = np.zeros(2)
        adder.add(Step(z, z, np.array(reward), np.array(done), np.zeros(2, bool), z, {}))
    np.testing.assert_allclose(seen, [[1.0, 2.0], [1.5, 2.0], [1.75, 3.0]])  # env 1 restarted after step 0
