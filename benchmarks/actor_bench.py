"""Actor-side measurements for ``throughput.py``: the actor loop against the raw vector env, and
one actor process of the scaling benchmark."""

from __future__ import annotations

import time

import gymnasium as gym
import jax
import numpy as np

from shoal.actors import BatchedActor, VariableClient, make_vector_env
from shoal.actors.environments import final_observations
from shoal.agents import get_builder
from shoal.core.interfaces import VariableSource
from shoal.core.specs import make_environment_spec
from shoal.core.types import Step
from shoal.replay import ReplayServer, make_transition_table, transition_signature

SLEEP_ENV = "SleepyCartPole-v1"


class FixedParams(VariableSource):
    def __init__(self, params) -> None:
        self.params = params

    def get_variables(self, known_version: int = -1):
        return 0, (None if known_version == 0 else self.params)


class SleepyCartPole(gym.Wrapper):
    """CartPole-v1 whose every step sleeps 1 ms first: a latency-bound env (a simulator, a robot)."""

    def __init__(self, **kwargs) -> None:
        super().__init__(gym.make("CartPole-v1", **kwargs))

    def step(self, action):
        time.sleep(0.001)
        return self.env.step(action)


def _dqn(spec):
    builder = get_builder("dqn")
    networks = builder.make_networks(spec)
    from shoal.agents.dqn.learning import init_state

    params = init_state(jax.random.PRNGKey(0), networks.q_network, spec.observation_shape, builder.config).params
    return builder, builder.make_policy(networks, spec, evaluation=False), params


def free_table(builder, spec, policy):
    """The agent's transition table with no rate limiting (so each side runs flat out)."""
    from shoal.agents.dqn.builder import TABLE

    c = builder.config
    return make_transition_table(TABLE, transition_signature(spec, policy.extras_spec), num_envs=spec.num_envs,
                                 batch_size=c.batch_size, sgd_steps_per_update=c.sgd_steps_per_update,
                                 samples_per_insert=1.0, samples_per_insert_tolerance=1e12, min_replay_size=1,
                                 max_replay_size=100_000)


def _actor_step(env, actor):
    def step(obs):
        action, extras = actor.select_action(obs)
        next_obs, reward, term, trunc, info = env.step(action)
        actor.observe(Step(obs, action, reward, term, trunc, final_observations(next_obs, term, trunc, info), extras))
        actor.update()
        return next_obs
    return step


def _rate(env, step_fn, seconds: float) -> float:
    obs, _ = env.reset(seed=0)
    obs = step_fn(obs)  # warm-up (and compile)
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        obs = step_fn(obs)
        steps += env.num_envs
    return steps / (time.perf_counter() - start)


def actor_rates(env_id: str, num_envs: int, seconds: float) -> dict[str, float]:
    """Env steps/s of: the raw vector env (random actions), env + DQN policy, env + policy + adder."""
    env = make_vector_env(env_id, num_envs, seed=0)
    spec = make_environment_spec(env)
    builder, policy, params = _dqn(spec)
    rates = {"raw_env_sps": _rate(env, lambda obs: env.step(env.action_space.sample())[0], seconds)}
    client = VariableClient(FixedParams(params), asynchronous=False)
    actor = BatchedActor(policy, jax.random.PRNGKey(0), client, None, num_envs=num_envs)
    rates["actor_sps"] = _rate(env, _actor_step(env, actor), seconds)
    server = ReplayServer([free_table(builder, spec, policy)])
    try:
        adder = builder.make_adder(server.client, spec, policy)
        actor = BatchedActor(policy, jax.random.PRNGKey(0), client, adder, num_envs=num_envs)
        rates["actor_adder_sps"] = _rate(env, _actor_step(env, actor), seconds)
        adder.close()
    finally:
        server.stop()
    return rates


def scaling_table():
    if SLEEP_ENV not in gym.registry:
        gym.register(SLEEP_ENV, entry_point=SleepyCartPole, max_episode_steps=500)
    spec = make_environment_spec(make_vector_env(SLEEP_ENV, 16, seed=0))
    builder, policy, _ = _dqn(spec)
    return free_table(builder, spec, policy)


def scaling_actor_steps(index: int, address: str, ready, go, start_at, phase_s: float,
                        actors_per_phase: tuple[int, ...]) -> list[int]:
    """One actor process: builds and compiles, puts its index on ``ready``, waits for ``go``;
    from Unix time ``start_at.value``, phase k lasts ``phase_s`` and this actor acts in it if
    ``index < actors_per_phase[k]``. Returns env steps per phase (a step counts in the phase it
    ends in; the first 10% of each phase is left out, and the count scaled back up)."""
    import reverb

    if SLEEP_ENV not in gym.registry:
        gym.register(SLEEP_ENV, entry_point=SleepyCartPole, max_episode_steps=500)
    env = make_vector_env(SLEEP_ENV, 16, seed=index)
    spec = make_environment_spec(env)
    builder, policy, params = _dqn(spec)
    adder = builder.make_adder(reverb.Client(address), spec, policy)
    actor = BatchedActor(policy, jax.random.PRNGKey(index), VariableClient(FixedParams(params), asynchronous=False),
                         adder, num_envs=16)
    step = _actor_step(env, actor)
    obs = step(env.reset(seed=index)[0])  # compiled before the phases begin
    ready.put(index)
    if not go.wait(timeout=600):
        raise TimeoutError("the benchmark did not start the phases within 600 s")
    start = start_at.value
    steps = np.zeros(len(actors_per_phase), np.int64)
    while (now := time.time()) < start + phase_s * len(actors_per_phase):
        phase = int((now - start) // phase_s) if now >= start else -1
        if phase < 0 or index >= actors_per_phase[phase]:
            time.sleep(0.005)
            continue
        obs = step(obs)
        end = time.time() - start
        if int(end // phase_s) == phase and end - phase * phase_s >= 0.1 * phase_s:
            steps[phase] += 16
    adder.close()
    return [int(s / 0.9) for s in steps]
