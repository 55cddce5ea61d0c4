"""Actor-side measurements for ``throughput.py``: the actor loop (``EnvironmentLoop``, as a run
steps it) against the raw vector env, and one actor process of the scaling benchmark."""

from __future__ import annotations

import os
import time

import gymnasium as gym
import jax
import numpy as np

from shoal.actors import BatchedActor, VariableClient
from shoal.actors.loops import EnvironmentLoop
from shoal.agents import get_builder
from shoal.core.interfaces import VariableSource
from shoal.core.specs import make_environment_spec
from shoal.envs import make_vector_env
from shoal.replay import make_replay_server, make_transition_table, transition_signature

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


def _dqn(spec, **settings):
    """The DQN builder (``settings``: config overrides), its acting policy, and initial params."""
    builder = get_builder("dqn", **settings)
    networks = builder.make_networks(spec)
    from shoal.agents.dqn.learning import init_state

    params = init_state(jax.random.PRNGKey(0), networks.q_network, spec.observation_shape, builder.config).params
    return builder, builder.make_policy(networks, spec, evaluation=False), params


def free_table(builder, spec, policy):
    """The agent's transition table with no rate limiting (so each side runs flat out)."""
    from shoal.agents.dqn.builder import TABLE

    c = builder.config
    return make_transition_table(
        TABLE,
        transition_signature(spec, policy.extras_spec),
        num_envs=spec.num_envs,
        batch_size=c.batch_size,
        sgd_steps_per_update=c.sgd_steps_per_update,
        samples_per_insert=1.0,
        samples_per_insert_tolerance=1e12,
        min_replay_size=1,
        max_replay_size=100_000,
    )


class _Window:
    """Env steps and seconds of one way of stepping a vector env, over windows taken in turns
    with the others (so a drift of the machine's speed weighs on each alike)."""

    def __init__(self, env, step) -> None:
        self.env, self.step, self.steps, self.seconds = env, step, 0, 0.0

    def run(self, seconds: float) -> None:
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            self.step()
            self.steps += self.env.num_envs
        self.seconds += time.perf_counter() - start

    @property
    def rate(self) -> float:
        return self.steps / self.seconds


def replay_backend() -> str | None:
    """The replay backend a benchmark measures: ``SHOAL_BENCH_REPLAY`` (reverb or native; the
    benchmarks' ``--replay-backend`` sets it, for their subprocesses too), else the default."""
    return os.environ.get("SHOAL_BENCH_REPLAY") or None


def actor_rates(
    env_id: str,
    num_envs: int,
    seconds: float,
    rounds: int = 4,
    overlap: str = "off",
    also: tuple[str, ...] = (),
    **settings,
) -> tuple[dict[str, float], dict]:
    """Env steps/s of: the raw vector env (random actions), the actor loop (``EnvironmentLoop``)
    with the DQN policy (``settings``: its config overrides), and the loop with the policy and
    its adder, each over ``seconds`` in ``rounds`` windows taken in turns (each on an env of its
    own); and what a vector step of the latter cost: microseconds per component of the loop's
    time breakdown (``other``: the loop's own work; ``raw_env_step``: the raw env's step). The
    loops step their envs as ``overlap`` says (``EnvironmentLoop``'s; the raw env on this thread);
    ``costs["overlap"]`` is what it resolved to (``env_step`` is then the wait for the env).
    ``also``: overlaps whose loops (policy and adder) are measured in the same turns, as
    ``actor_adder_sps_<overlap>`` (a fair comparison on a machine whose load drifts)."""
    envs = [make_vector_env(env_id, num_envs, seed=0) for _ in range(3 + len(also))]
    spec = make_environment_spec(envs[0])
    builder, policy, params = _dqn(spec, **settings)
    client = VariableClient(FixedParams(params), asynchronous=False)
    server = make_replay_server([free_table(builder, spec, policy)], replay_backend())
    try:
        adders = [builder.make_adder(server.client, spec, policy) for _ in range(1 + len(also))]
        adder = adders[0]
        loops = [
            EnvironmentLoop(env, BatchedActor(policy, jax.random.PRNGKey(0), client, a, num_envs=num_envs), overlap=o)
            for env, a, o in zip(envs[1:], (None, *adders), (overlap, overlap, *also))
        ]
        envs[0].reset(seed=0)
        windows = [
            _Window(envs[0], lambda: envs[0].step(envs[0].action_space.sample())),
            *(_Window(env, loop.step) for env, loop in zip(envs[1:], loops)),
        ]
        for window in windows:
            window.step()  # (compiles the policy)
        before = loops[1].stopwatch.snapshot()
        for _ in range(rounds):
            for window in windows:
                window.run(seconds / rounds)
        for a in adders:
            a.close()
    finally:
        for loop in locals().get("loops", []):
            loop.close()
        server.stop()
        for env in envs:
            env.close()
    raw, plain, added, *others = windows
    vector_steps = added.steps // num_envs
    costs = {k: (v - before.get(k, 0.0)) / vector_steps * 1e6 for k, v in loops[1].stopwatch.snapshot().items()}
    costs["other"] = added.seconds / vector_steps * 1e6 - sum(costs.values())
    costs["raw_env_step"] = 1e6 * num_envs / raw.rate
    rates = {"raw_env_sps": raw.rate, "actor_sps": plain.rate, "actor_adder_sps": added.rate}
    rates.update({f"actor_adder_sps_{o}": w.rate for o, w in zip(also, others)})
    return rates, {**{k: round(v) for k, v in costs.items()}, "overlap": loops[1].overlap}


def scaling_table():
    if SLEEP_ENV not in gym.registry:
        gym.register(SLEEP_ENV, entry_point=SleepyCartPole, max_episode_steps=500)
    spec = make_environment_spec(make_vector_env(SLEEP_ENV, 16, seed=0))
    builder, policy, _ = _dqn(spec)
    return free_table(builder, spec, policy)


def scaling_actor_steps(
    index: int, server: tuple, ready, go, start_at, phase_s: float, actors_per_phase: tuple[int, ...]
) -> list[int]:
    """One actor process: builds and compiles, puts its index on ``ready``, waits for ``go``;
    from Unix time ``start_at.value``, phase k lasts ``phase_s`` and this actor acts in it if
    ``index < actors_per_phase[k]``. Returns env steps per phase (a step counts in the phase it
    ends in; the first 10% of each phase is left out, and the count scaled back up)."""
    from replay_throughput import client_of

    if SLEEP_ENV not in gym.registry:
        gym.register(SLEEP_ENV, entry_point=SleepyCartPole, max_episode_steps=500)
    env = make_vector_env(SLEEP_ENV, 16, seed=index)
    spec = make_environment_spec(env)
    builder, policy, params = _dqn(spec)
    # (Shoal's client of the server (``server``: backend, address, token), as a run's actors
    # have: Reverb's own ``Client`` has another writer, whose create_item the adder's call does not fit)
    adder = builder.make_adder(client_of(*server), spec, policy)
    actor = BatchedActor(
        policy, jax.random.PRNGKey(index), VariableClient(FixedParams(params), asynchronous=False), adder, num_envs=16
    )
    env.reset(seed=index)
    loop = EnvironmentLoop(env, actor)
    loop.step()  # compiled before the phases begin
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
        loop.step()
        end = time.time() - start
        if int(end // phase_s) == phase and end - phase * phase_s >= 0.1 * phase_s:
            steps[phase] += 16
    adder.close()
    return [int(s / 0.9) for s in steps]


def main() -> None:
    """``python benchmarks/actor_bench.py [--env ID] [--num-envs N] [--seconds S] [--replay-backend B]``:
    one JSON line of ``actor_rates`` for any env (``envpool:CartPole-v1`` against ``CartPole-v1``;
    an Atari id, ``ALE/...`` or ``envpool:<Game>-v5``, acts with DQN's ``atari`` preset)."""
    import argparse
    import json

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--num-envs", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--replay-backend", choices=["reverb", "native"], default=None)
    parser.add_argument(
        "--overlap",
        choices=["auto", "off", "thread", "process"],
        default="auto",
        help="the actor loop's (default auto)",
    )
    parser.add_argument(
        "--also-overlap",
        nargs="*",
        default=[],
        choices=["off", "thread", "process"],
        help="loops with these overlaps measured in the same turns (actor_efficiency_<overlap>)",
    )
    args = parser.parse_args()
    if args.replay_backend:
        os.environ["SHOAL_BENCH_REPLAY"] = args.replay_backend
    settings: dict = {}
    if args.env.startswith("ALE/") or (args.env.startswith("envpool:") and args.env.endswith("-v5")):
        from shoal.agents.presets import find_preset

        settings = find_preset("dqn", "ALE/Breakout-v5").settings
    rates, costs = actor_rates(
        args.env, args.num_envs, args.seconds, overlap=args.overlap, also=tuple(args.also_overlap), **settings
    )
    print(
        json.dumps(
            {
                "env": args.env,
                "num_envs": args.num_envs,
                "actor_efficiency": round(rates["actor_adder_sps"] / rates["raw_env_sps"], 3),
                "actor_policy_efficiency": round(rates["actor_sps"] / rates["raw_env_sps"], 3),
                **{
                    f"actor_efficiency_{o}": round(rates[f"actor_adder_sps_{o}"] / rates["raw_env_sps"], 3)
                    for o in args.also_overlap
                },
                "actor_sps": {k: round(v) for k, v in rates.items()},
                "actor_step_us": costs,
            }
        )
    )


if __name__ == "__main__":
    main()
