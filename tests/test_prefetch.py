"""An actor loop that prefetches (``BatchedActor`` starts the next action while its adder writes)
acts exactly as one that does not: the same actions, RNG keys, env-step counts, recurrent states
and params versions, also when the params change between a step's write and the next action."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from shoal.actors import BatchedActor, EnvironmentLoop, VariableClient
from shoal.core.interfaces import Adder, VariableSource
from shoal.core.types import Policy
from shoal.envs import make_vector_env

NUM_ENVS = 4


class Versions(VariableSource):
    """Serves params ``{"w": version}``; the version goes up by one every ``period`` fetches."""

    def __init__(self, period: int) -> None:
        self.period, self.fetches = period, 0

    def get_variables(self, known_version: int = -1):
        self.fetches += 1
        version = self.fetches // self.period
        return (version, None) if known_version == version else (version, {"w": jnp.float32(version)})


class Recorder(Adder):
    def __init__(self) -> None:
        self.steps = []

    def add(self, step) -> None:
        self.steps.append(step)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


def random_policy(recurrent: bool) -> Policy:
    """Random actions (so every step's RNG key shows), extras that report what the policy was
    given: the env-step count, the params, and (recurrent) the steps since the episode began."""

    def apply(params, key, observation, info, state=None):
        key, action_key = jax.random.split(key)
        n = observation.shape[0]
        extras = {
            "env_steps": jnp.full(n, info.env_steps),
            "w": jnp.full(n, params["w"]),
            "version": jnp.full(n, info.params_version),
        }
        actions = jax.random.randint(action_key, (n,), 0, 2)
        if state is None:
            return actions, extras, key
        return actions, {**extras, "age": state}, key, state + 1

    return Policy(apply, initial_state=(lambda n: jnp.zeros(n, jnp.int32)) if recurrent else None)


class CountingActor(BatchedActor):
    dispatches = 0

    def _dispatch(self, observation):
        self.dispatches += 1
        return super()._dispatch(observation)


def run(prefetch: bool, recurrent: bool, period: int, steps: int = 80):
    env = make_vector_env("CartPole-v1", NUM_ENVS, seed=0)
    adder = Recorder()
    actor = CountingActor(
        random_policy(recurrent),
        jax.random.PRNGKey(3),
        VariableClient(Versions(period), asynchronous=False),
        adder,
        num_envs=NUM_ENVS,
    )
    loop = EnvironmentLoop(env, actor, prefetch=prefetch)
    for _ in range(steps):
        loop.step()
    env.close()
    return adder.steps, actor.dispatches


@pytest.mark.parametrize("recurrent", [False, True], ids=["feed-forward", "recurrent"])
@pytest.mark.parametrize("period", [10_000, 1], ids=["params-fixed", "params-change-every-step"])
def test_a_prefetching_loop_acts_as_one_that_does_not(recurrent, period):
    plain, plain_dispatches = run(False, recurrent, period)
    fetched, fetched_dispatches = run(True, recurrent, period)
    assert len(plain) == len(fetched) == 80
    for a, b in zip(plain, fetched):
        np.testing.assert_array_equal(a.action, b.action)
        np.testing.assert_array_equal(a.observation, b.observation)
        assert a.extras.keys() == b.extras.keys()
        for key in a.extras:
            np.testing.assert_array_equal(a.extras[key], b.extras[key])
    if recurrent:  # (episodes did end in the run, and states restarted there)
        ages = np.array([s.extras["age"] for s in fetched])
        assert (ages[1:] == 0).any() and ages.max() > 5
    versions = np.array([s.extras["version"][0] for s in fetched])
    if period == 1:  # every action after a params change was computed again, with the new params
        assert len(set(versions.tolist())) > 10
        assert fetched_dispatches > plain_dispatches
    else:  # every action but the first was prefetched: one policy call a step, as without (and
        assert set(versions.tolist()) == {0}  # the 81st action's, started at the last step)
        assert plain_dispatches == 80 and fetched_dispatches == 81


def test_evaluation_after_training_does_not_take_a_prefetched_action():
    env = make_vector_env("CartPole-v1", NUM_ENVS, seed=0)
    actor = CountingActor(
        random_policy(False),
        jax.random.PRNGKey(3),
        VariableClient(Versions(10_000), asynchronous=False),
        Recorder(),
        num_envs=NUM_ENVS,
    )
    loop = EnvironmentLoop(env, actor)
    loop.step()
    assert actor._pending is not None  # (the next action was started)
    other = np.zeros((NUM_ENVS, 4), np.float32)
    before = actor.dispatches
    actor.select_action(other)  # another observation: computed for it, the prefetched one dropped
    assert actor.dispatches == before + 1 and actor._pending is None
    env.close()


def test_the_one_process_runner_prefetches_for_on_policy_agents_only():
    """(An off-policy agent's params change at almost every step: a prefetched action would be
    computed again.)"""
    from shoal.launch.experiments.learner_pacing import LearningActor

    actor = BatchedActor(
        random_policy(False),
        jax.random.PRNGKey(3),
        VariableClient(Versions(10_000), asynchronous=False),
        num_envs=NUM_ENVS,
    )
    assert LearningActor(actor, None, None, "table", 1, pull_after=True).prefetches
    assert not LearningActor(actor, None, None, "table", 1, pull_after=False).prefetches


def test_the_classic_runtime_policy_computes_what_jit_computes_for_any_shape():
    from shoal.actors.actor import ClassicCpuJit

    def f(x, key):
        return jnp.tanh(x @ x.T).sum(axis=1) + jax.random.uniform(key, (x.shape[0],))

    key = jax.random.PRNGKey(0)
    fast = ClassicCpuJit(f)
    for rows in (4, 4, 7):  # (compiled again for the second shape)
        x = np.random.default_rng(rows).normal(size=(rows, 3)).astype(np.float32)
        np.testing.assert_allclose(fast(x, key), jax.jit(f)(x, key), rtol=1e-6)
    # (XLA's classic runtime where its option exists: JAX 0.4.34's; later XLAs dropped it)
    assert fast._classic or not jax.__version__.startswith("0.4.")


def test_without_the_classic_runtime_the_policy_is_plain_jit():
    """(A JAX whose XLA has no such option: the compile refuses it, and jit serves.)"""
    from shoal.actors.actor import ClassicCpuJit

    fallback = ClassicCpuJit(lambda x: x * 2)
    fallback.OPTIONS = {"xla_no_such_option_here": True}
    np.testing.assert_array_equal(fallback(np.arange(3.0)), np.arange(3.0) * 2)
    assert not fallback._classic
    np.testing.assert_array_equal(fallback(np.arange(4.0)), np.arange(4.0) * 2)
