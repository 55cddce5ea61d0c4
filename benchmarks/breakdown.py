"""Where DQN's time goes on this machine: prints one JSON object.

    python benchmarks/breakdown.py [--env CartPole-v1 --num-envs 16 --seconds 3]

* raw_env_sps: the vector env alone, with numpy random actions;
* actor_sps: env + the jitted batched policy (one call per vector step);
* actor_adder_sps: the same, plus the n-step adder writing one Reverb item per vector step;
* learner_sgd_steps_per_s: learner updates fed by the real Reverb dataset iterator (a full
  table, no rate limiting), with the default DQN config (batch, scan length, network);
* compile_s: first-call (jit) time of the policy and of the learner update.
Ratios to raw_env_sps are included for the actor rows.
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import jax  # noqa: E402

from shoal.actors import BatchedActor, VariableClient, make_vector_env  # noqa: E402
from shoal.actors.environments import final_observations  # noqa: E402
from shoal.agents import get_builder  # noqa: E402
from shoal.core.counting import Counter  # noqa: E402
from shoal.core.interfaces import VariableSource  # noqa: E402
from shoal.core.specs import make_environment_spec  # noqa: E402
from shoal.core.types import Step  # noqa: E402
from shoal.replay import ReplayServer  # noqa: E402


class FixedParams(VariableSource):
    def __init__(self, params):
        self.params = params

    def get_variables(self, known_version=-1):
        return 0, (None if known_version == 0 else self.params)


def timed_loop(env, step_fn, seconds: float) -> float:
    obs, _ = env.reset(seed=0)
    obs = step_fn(obs)  # warm-up (and compile)
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        obs = step_fn(obs)
        steps += env.num_envs
    return steps / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--num-envs", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()

    env = make_vector_env(args.env, args.num_envs, seed=0)
    spec = make_environment_spec(env)
    builder = get_builder("dqn")
    networks = builder.make_networks(spec)
    from shoal.agents.dqn.learning import init_state

    params = init_state(jax.random.PRNGKey(0), networks.q_network, spec.observation_shape, builder.config).params
    policy = builder.make_policy(networks, spec, evaluation=False)
    out: dict = {"env": args.env, "num_envs": args.num_envs, "devices": [str(d) for d in jax.local_devices()]}

    def raw(obs):
        return env.step(env.action_space.sample())[0]

    out["raw_env_sps"] = timed_loop(env, raw, args.seconds)

    def make_actor_step(actor):
        def step(obs):
            action, extras = actor.select_action(obs)
            next_obs, reward, term, trunc, info = env.step(action)
            actor.observe(Step(obs, action, reward, term, trunc,
                               final_observations(next_obs, term, trunc, info), extras))
            actor.update()
            return next_obs
        return step

    client = VariableClient(FixedParams(params), asynchronous=False)
    actor = BatchedActor(policy, jax.random.PRNGKey(0), client, None, num_envs=args.num_envs)
    t0 = time.perf_counter()
    actor.select_action(env.reset(seed=0)[0])
    out["compile_s"] = {"policy": time.perf_counter() - t0}
    out["actor_sps"] = timed_loop(env, make_actor_step(actor), args.seconds)

    # One table with the agent's layout but no rate limiting, so each side can run flat out.
    from shoal.agents.dqn.builder import TABLE
    from shoal.replay import make_transition_table, transition_signature

    c = builder.config
    table = make_transition_table(
        TABLE, transition_signature(spec, policy.extras_spec), num_envs=args.num_envs,
        batch_size=c.batch_size, sgd_steps_per_update=c.sgd_steps_per_update, samples_per_insert=1.0,
        samples_per_insert_tolerance=1e12, min_replay_size=1, max_replay_size=100_000)
    server = ReplayServer([table])
    try:
        adder = builder.make_adder(server.client, spec, policy)
        actor = BatchedActor(policy, jax.random.PRNGKey(0), client, adder, num_envs=args.num_envs)
        out["actor_adder_sps"] = timed_loop(env, make_actor_step(actor), args.seconds)
        adder.flush()
        for key in ("actor_sps", "actor_adder_sps"):
            out[key + "_ratio"] = out[key] / out["raw_env_sps"]
        learner = builder.make_learner(jax.random.PRNGKey(0), networks,
                                       builder.make_dataset_iterator(server.client, spec), None, Counter(),
                                       server.client)
        t0 = time.perf_counter()
        learner.step()
        jax.block_until_ready(learner._state)
        out["compile_s"]["learner_update"] = time.perf_counter() - t0
        updates, start = 0, time.perf_counter()
        while time.perf_counter() - start < args.seconds:
            learner.step()
            updates += 1
        jax.block_until_ready(learner._state)
        elapsed = time.perf_counter() - start
        learner.close()
        out["learner_sgd_steps_per_s"] = updates * c.sgd_steps_per_update / elapsed
        out["learner_transitions_per_s"] = out["learner_sgd_steps_per_s"] * c.batch_size
        out["learner_config"] = {"batch_size": c.batch_size, "sgd_steps_per_update": c.sgd_steps_per_update,
                                 "hidden_sizes": list(c.hidden_sizes)}
    finally:
        server.stop()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
