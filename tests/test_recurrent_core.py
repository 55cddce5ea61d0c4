"""The actor carries a recurrent policy's state: one per env, from step to step, reset exactly
where an episode ended (training and evaluation); feed-forward policies are unchanged."""

import jax
import jax.numpy as jnp
import numpy as np

from shoal.actors import BatchedActor, VariableClient
from shoal.actors.loops import evaluate
from shoal.core.interfaces import VariableSource
from shoal.core.types import Policy, Step
from shoal.envs import make_vector_env

NUM_ENVS = 3


class FixedParams(VariableSource):
    """Serves one version of (empty) parameters."""

    def get_variables(self, known_version: int = -1):
        return (0, None) if known_version == 0 else (0, {})


def counting_policy() -> Policy:
    """A recurrent policy whose state counts the steps since its env's episode began, and which
    reports the state it acted from in its extras."""

    def apply(params, key, observation, info, state):
        n = observation.shape[0]
        return jnp.zeros(n, jnp.int32), {"steps": state["steps"]}, key, {"steps": state["steps"] + 1}

    return Policy(apply, initial_state=lambda n: {"steps": jnp.zeros(n, jnp.int32)})


def make_actor(policy: Policy, num_envs: int = NUM_ENVS) -> BatchedActor:
    return BatchedActor(
        policy, jax.random.PRNGKey(0), VariableClient(FixedParams(), asynchronous=False), num_envs=num_envs
    )


def test_the_state_is_reset_exactly_where_episodes_end():
    # (terminated, truncated) per vector step: env 0 ends at steps 2 and 3, env 1 is truncated
    # at steps 0 and 4, env 2 never ends.
    ends = [
        ((0, 0, 0), (0, 1, 0)),
        ((0, 0, 0), (0, 0, 0)),
        ((1, 0, 0), (0, 0, 0)),
        ((1, 0, 0), (0, 0, 0)),
        ((0, 0, 0), (0, 1, 0)),
        ((0, 0, 0), (0, 0, 0)),
    ]
    actor = make_actor(counting_policy())
    observation = np.zeros((NUM_ENVS, 2), np.float32)
    seen = []
    for terminated, truncated in ends:
        _, extras = actor.select_action(observation)
        seen.append(extras["steps"].tolist())
        flags = np.zeros(NUM_ENVS)
        actor.observe(
            Step(
                observation,
                flags.astype(np.int32),
                flags,
                np.array(terminated, bool),
                np.array(truncated, bool),
                observation,
                extras,
            )
        )
    # the steps each env had taken in its episode when it acted
    assert seen == [[0, 0, 0], [1, 0, 1], [2, 1, 2], [0, 2, 3], [0, 3, 4], [1, 0, 5]]


def test_evaluation_starts_every_env_fresh_and_resets_where_its_episode_ended():
    class Recording(BatchedActor):
        def select_action(self, observation):
            actions, extras = super().select_action(observation)
            self.seen.append(extras["steps"].copy())
            return actions, extras

    actor = Recording(
        counting_policy(), jax.random.PRNGKey(0), VariableClient(FixedParams(), asynchronous=False), num_envs=NUM_ENVS
    )
    actor.seen = []
    for _ in range(5):  # state carried from "training" steps
        actor.select_action(np.zeros((NUM_ENVS, 4), np.float32))
    actor.seen.clear()
    env = make_vector_env("CartPole-v1", NUM_ENVS, seed=0)
    returns = evaluate(env, actor, seed=0)
    seen = np.array(actor.seen)  # [steps, envs]
    assert np.all(seen[0] == 0)  # fresh states at the evaluation's start
    for i, ret in enumerate(returns):  # CartPole pays 1 a step: env i's first episode lasted ret steps
        length = int(ret)
        assert seen[:length, i].tolist() == list(range(length))
        if length < len(seen):  # it kept stepping (vector envs step together): a new episode, fresh state
            assert seen[length, i] == 0
    env.close()


def test_a_feed_forward_policy_is_unchanged():
    def apply(params, key, observation, info):
        return jnp.ones(observation.shape[0], jnp.int32), {}, key

    actor = make_actor(Policy(apply))
    actions, extras = actor.select_action(np.zeros((NUM_ENVS, 2), np.float32))
    assert actions.tolist() == [1, 1, 1] and extras == {}
    actor.end_episodes(np.ones(NUM_ENVS, bool))  # (nothing to reset)
