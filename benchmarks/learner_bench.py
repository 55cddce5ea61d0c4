"""How fast each agent's learner updates, fed through its prefetcher and in memory.

    python benchmarks/learner_bench.py --in-memory [--agents dqn ppo impala sac] [--configs default large]
    python benchmarks/learner_bench.py --replay        # DQN and PPO fed from a real Reverb table
    python benchmarks/learner_bench.py --presets [atari minatar ...]   # every agent preset's compile seconds

``--in-memory`` (no replay server: runs wherever JAX runs, a GPU machine included) builds each
agent's learner through its builder and feeds it synthetic host batches of the right shapes
(``builder.example_batch`` filled with random numbers; a pool of 4, cycled):

* ``fed``: ``learner.step()`` -- the prefetch thread places each host batch on the devices while
  the previous update runs, as in a training run;
* ``in_memory``: the same compiled update applied again and again to one batch already on the
  devices (the benchmark reaches into the learner for it);

each as updates/s, SGD steps/s and samples/s (transitions, or env steps of sequences, per
second, epochs counted), and ``ratio`` = fed / in memory. ``default`` is each agent's default
config; ``large`` a GPU-sized one. One JSON object on stdout (a table on stderr), with the
devices it ran on.

Every row has ``compile_s``: the seconds the learner's update took to compile (its
``warm_up``; this script turns on no persistent compilation cache). ``--presets`` measures each
agent's presets (``shoal.agents.presets``) on an env of the preset's family (``FAMILY_ENVS``:
Breakout for Atari), skipping one whose env is not installed.

``--replay`` measures the feed from Reverb instead (``learner_feed_ratio`` in throughput.py):
a real table filled by a real actor, the real dataset iterator, on CartPole-v1.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
import time
from collections import deque
from collections.abc import Callable

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import jax  # noqa: E402
import numpy as np  # noqa: E402

from shoal.agents import get_builder  # noqa: E402
from shoal.core.interfaces import Dataset  # noqa: E402
from shoal.core.specs import make_environment_spec  # noqa: E402
from shoal.core.types import Sample  # noqa: E402
from shoal.envs import make_vector_env  # noqa: E402
from shoal.learners.replicated import MAX_IN_FLIGHT  # noqa: E402

# agent -> (env, num_envs, {config name: settings})
CONFIGS = {
    "dqn": ("CartPole-v1", 16, {"default": {}, "large": {"batch_size": 4096, "hidden_sizes": (512, 512)}}),
    # (synthetic rollouts carry no policy version to go by: PPO's staleness rule is off here)
    "ppo": (
        "CartPole-v1",
        16,
        {
            "default": {"max_policy_lag": 10**9},
            "large": {"rollout_length": 128, "hidden_sizes": (256, 256), "num_envs": 64, "max_policy_lag": 10**9},
        },
    ),
    "impala": (
        "CartPole-v1",
        16,
        {
            "default": {},
            "large": {"rollout_length": 64, "sequences_per_update": 256, "hidden_sizes": (256, 256), "num_envs": 64},
        },
    ),
    "sac": ("Pendulum-v1", 16, {"default": {}, "large": {"batch_size": 1024, "hidden_sizes": (256, 256)}}),
}


class SyntheticDataset(Dataset):
    """Random host batches shaped like ``example`` (a pool of ``pool`` of them, cycled)."""

    table, items_per_update = "synthetic", 1

    def __init__(self, example: Sample, spec, pool: int = 4, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.num_envs = spec.num_envs
        self._example, self._i = example, 0
        self._batches = [
            Sample(jax.tree_util.tree_map_with_path(lambda p, x: _fill(p, x, spec, rng), example.data), example.keys)
            for _ in range(pool)
        ]

    def __next__(self) -> Sample:
        self._i += 1
        return self._batches[self._i % len(self._batches)]

    def example(self) -> Sample:
        return self._example


class NoReplay:
    """A replay client that drops priority writes (a prioritized agent's learner needs one)."""

    def mutate_priorities(self, table, updates=None, deletes=None) -> None:
        pass


def _fill(path, x: np.ndarray, spec, rng: np.random.Generator) -> np.ndarray:
    name = str(getattr(path[-1], "key", path[-1]))
    if name == "action" and spec.num_actions is not None:
        return rng.integers(0, spec.num_actions, x.shape).astype(x.dtype)
    if name == "action":
        return rng.uniform(spec.action_space.low, spec.action_space.high, x.shape).astype(x.dtype)
    if name in ("terminated", "truncated"):
        return rng.random(x.shape) < 0.02
    if name == "discount":
        return np.where(rng.random(x.shape) < 0.02, 0.0, 0.99**3).astype(x.dtype)
    if name in ("probability", "table_size"):
        return np.full(x.shape, 1e-3 if name == "probability" else 1e4, x.dtype)
    if name == "log_prob":
        return np.log(rng.uniform(0.2, 0.8, x.shape)).astype(x.dtype)
    if name == "policy_version":
        return np.zeros(x.shape, x.dtype)
    if np.issubdtype(x.dtype, np.integer):
        return rng.integers(0, 256, x.shape).astype(x.dtype)
    return rng.normal(size=x.shape).astype(x.dtype)


def samples_per_update(builder, example: Sample) -> int:
    """Transitions (or env steps of sequences) one update trains on, epochs counted."""
    leading = jax.tree_util.tree_leaves(example.data)[0].shape[:2]
    return math.prod(leading) * getattr(builder.config, "num_epochs", 1)


def _rate(step, seconds: float, done, calls: list | None = None) -> float:
    """Calls of ``step`` per second over about ``seconds`` (``done`` waits for the last)."""
    step()  # (warm: compiled already)
    done()
    start, n = time.perf_counter(), 0
    while time.perf_counter() - start < seconds:
        step()
        n += 1
    done()
    if calls is not None:
        calls.append(n)
    return n / (time.perf_counter() - start)


@contextlib.contextmanager
def python_dispatches():
    """Counts the calls of jitted functions that missed JAX's C++ dispatch path (each one goes
    through Python: tracing-cache lookups, argument checks) while the block runs."""
    import jax._src.pjit as pjit

    name = "_run_python_pjit" if hasattr(pjit, "_run_python_pjit") else "_python_pjit_helper"
    original, count = getattr(pjit, name), [0]

    def counted(*args, **kwargs):
        count[0] += 1
        return original(*args, **kwargs)

    setattr(pjit, name, counted)
    try:
        yield count
    finally:
        setattr(pjit, name, original)


def in_memory_stepper(learner, data) -> tuple[Callable[[], None], Callable[[], None]]:
    """``(step, done)``: ``learner``'s compiled update applied again and again to ``data`` (a
    batch already on the devices) from a copy of its state, keeping the last donated states as
    the learner does (``shoal.learners.update_checks``), and the wait for the last update."""
    state = {"params": learner._params, "rest": jax.tree_util.tree_map(lambda x: x.copy(), learner._rest)}
    donated: deque = deque(maxlen=2 * MAX_IN_FLIGHT)

    def step() -> None:
        donated.append(state["rest"])
        state["params"], state["rest"], _, _ = learner._update(state["params"], state["rest"], data)

    return step, lambda: jax.block_until_ready(state["params"])


def learner_speed(
    agent: str, config_name: str, seconds: float, env_id: str | None = None, settings: dict | None = None
) -> dict:
    """One agent's learner with config ``config_name`` of ``CONFIGS`` (or ``settings`` on
    ``env_id``): its compile and update speeds."""
    default_env, num_envs, configs = CONFIGS.get(agent, ("CartPole-v1", 16, {}))
    settings = dict(configs[config_name] if settings is None else settings)
    num_envs = settings.pop("num_envs", num_envs)
    builder = get_builder(agent, **settings)
    env = make_vector_env(env_id or default_env, num_envs, seed=0)
    spec = make_environment_spec(env)
    env.close()
    networks = builder.make_networks(spec)
    example = builder.example_batch(spec, builder.make_policy(networks, spec, evaluation=False))
    dataset = SyntheticDataset(example, spec)
    learner = builder.make_learner(jax.random.PRNGKey(0), networks, dataset, replay_client=NoReplay())
    try:
        compiling = time.perf_counter()
        learner.warm_up(example)  # (the compiler: no persistent cache is on in this script)
        compile_s = time.perf_counter() - compiling
        learner.step()  # (the first update: its dispatch path is set up)
        calls: list = []
        with python_dispatches() as missed:
            fed = _rate(learner.step, seconds, learner.check_finite, calls)
        data = learner.placed(next(dataset).data)  # one batch, already on the devices
        in_memory_step, in_memory_done = in_memory_stepper(learner, data)

        in_memory = _rate(in_memory_step, seconds, in_memory_done)
        sgd_steps = learner._static_sgd_steps or 1
    finally:
        learner.close()
    samples = samples_per_update(builder, example)
    return {
        "compile_s": round(compile_s, 2),
        "updates_per_s": {"fed": round(fed, 1), "in_memory": round(in_memory, 1)},
        "sgd_steps_per_s": {"fed": round(fed * sgd_steps), "in_memory": round(in_memory * sgd_steps)},
        "samples_per_s": {"fed": round(fed * samples), "in_memory": round(in_memory * samples)},
        "ratio": round(fed / in_memory, 3),
        "sgd_steps_per_update": sgd_steps,
        "samples_per_update": samples,
        "python_dispatches_per_update": round(missed[0] / (calls[0] + 1), 3),
    }


def in_memory_table(agents, configs, seconds: float) -> dict:
    results = {}
    for agent in agents:
        for name in configs:
            print(f"[learner_bench] {agent} {name} ...", file=sys.stderr, flush=True)
            results.setdefault(agent, {})[name] = learner_speed(agent, name, seconds)
    return {
        "jax": jax.__version__,
        "backend": jax.default_backend(),
        "devices": [str(d) for d in jax.local_devices()],
        "results": results,
    }


# a task family's env for the presets' compile times: (discrete actions, continuous)
FAMILY_ENVS = {
    "classic": ("CartPole-v1", "Pendulum-v1"),
    "box2d": ("LunarLander-v3", "BipedalWalker-v3"),
    "mujoco": (None, "HalfCheetah-v5"),
    "atari": ("ALE/Breakout-v5", None),
    "minatar": ("MinAtar/Breakout-v1", None),
    "memory": ("shoal/CartPoleNoVelocity-v1", None),
}


def preset_table(agents, families, seconds: float) -> dict:
    """Every preset of ``agents`` for ``families``: compile seconds (an empty cache) and update
    speed, on the family's env (``FAMILY_ENVS``); a preset whose env is not installed is skipped."""
    from shoal.agents.presets import presets

    results = {}
    for preset in presets():
        if preset.agent not in agents or preset.family not in families:
            continue
        env_id = FAMILY_ENVS[preset.family][1 if preset.agent == "sac" else 0] or FAMILY_ENVS[preset.family][1]
        settings = {**preset.settings, "num_envs": preset.experiment.get("num_envs", 16)}
        if preset.agent == "ppo":
            settings["max_policy_lag"] = 10**9  # (synthetic rollouts carry no policy version)
            settings.setdefault(
                "schedule_env_steps", preset.experiment.get("max_env_steps", 10**6)
            )  # (the run's budget)
        print(f"[learner_bench] {preset.name} on {env_id} ...", file=sys.stderr, flush=True)
        try:
            results.setdefault(preset.agent, {})[preset.family] = {
                "env": env_id,
                **learner_speed(preset.agent, preset.family, seconds, env_id, settings),
            }
        except Exception as e:  # noqa: BLE001 -- an extra not installed, or an env the agent cannot act in
            results.setdefault(preset.agent, {})[preset.family] = {"env": env_id, "skipped": f"{type(e).__name__}: {e}"}
    return {
        "jax": jax.__version__,
        "backend": jax.default_backend(),
        "devices": [str(d) for d in jax.local_devices()],
        "results": results,
    }


def markdown(out: dict) -> str:
    lines = [
        f"devices: {', '.join(out['devices'])} (JAX {out['jax']})",
        "",
        "| agent | config | compile s | updates/s fed | updates/s in memory | fed / in memory | SGD steps/s fed "
        "| samples/s fed |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for agent, configs in out["results"].items():
        for name, r in configs.items():
            if "skipped" in r:
                lines.append(f"| {agent} | {name} | skipped: {r['skipped'][:80]} |")
                continue
            lines.append(
                f"| {agent} | {name} | {r['compile_s']:.1f} | {r['updates_per_s']['fed']:,.0f} "
                f"| {r['updates_per_s']['in_memory']:,.0f} | {r['ratio']:.2f} | {r['sgd_steps_per_s']['fed']:,} "
                f"| {r['samples_per_s']['fed']:,} |"
            )
    return "\n".join(lines)


# -- fed from Reverb (--replay) ---------------------------------------------------------------
REPLAY_AGENTS = {
    "dqn": {"num_envs": 16, "overrides": {}},
    "ppo": {"num_envs": 8, "overrides": {"queue_capacity": 100_000, "max_policy_lag": 10**9}},
    "r2d2": {
        "num_envs": 8,
        "overrides": {"samples_per_insert": 10_000.0, "samples_per_insert_tolerance": 1_000.0, "min_replay_size": 50},
    },
}


ROUNDS = 3  # windows of each kind per feed ratio, taken in turns


def replay_feed_ratio(name: str, seconds: float) -> dict:
    """Updates/s of ``name``'s learner fed from a filled table (Reverb, or native with
    ``SHOAL_BENCH_REPLAY=native``), against in memory: ``ROUNDS`` windows of each in turns,
    ``seconds`` of each in all."""
    from actor_bench import replay_backend

    from shoal.actors import EnvironmentLoop
    from shoal.core.counting import Counter
    from shoal.replay import make_replay_server

    setting = REPLAY_AGENTS[name]
    builder = get_builder(name, **setting["overrides"])
    env = make_vector_env("CartPole-v1", setting["num_envs"], seed=0)
    spec = make_environment_spec(env)
    networks = builder.make_networks(spec)
    policy = builder.make_policy(networks, spec, evaluation=False)
    if name == "dqn":
        from actor_bench import free_table

        tables = [free_table(builder, spec, policy)]
    else:
        tables = builder.make_replay_tables(spec, policy)
    server = make_replay_server(tables, replay_backend())
    learner = builder.make_learner(
        jax.random.PRNGKey(0),
        networks,
        builder.make_dataset_iterator(server.client, spec),
        None,
        Counter(),
        server.client,
    )
    adder = builder.make_adder(server.client, spec, policy)
    loop = EnvironmentLoop(
        env, builder.make_actor(jax.random.PRNGKey(1), policy, spec, learner, adder, asynchronous_updates=False)
    )
    steps_per_update = getattr(builder.config, "rollout_length", 1)

    def fill(updates: int) -> None:
        for _ in range(updates * steps_per_update):
            loop.step()
        adder.flush()

    try:
        fill(max(4, 2000 // steps_per_update))
        learner.warm_up(builder.example_batch(spec, policy))
        data = learner.placed(builder.example_batch(spec, policy).data)
        in_memory_step, in_memory_done = in_memory_stepper(learner, data)

        # (windows in turns, ROUNDS of each: the same update in memory drifts with the machine's
        # load as much as the feed does, and the ratio takes both from the same minutes)
        in_memory = fed = 0.0
        for _ in range(ROUNDS):
            rate = _rate(in_memory_step, seconds / ROUNDS, in_memory_done)
            in_memory += rate / ROUNDS
            if name == "ppo":  # a queue: every update takes its own rollout
                fill(max(5, math.ceil(rate * seconds / ROUNDS)) + 4)
            fed += _rate(learner.step, seconds / ROUNDS, learner.check_finite) / ROUNDS
    finally:
        adder.close()
        learner.close()
        server.stop()
        env.close()
    return {"fed": round(fed, 1), "in_memory": round(in_memory, 1), "ratio": round(fed / in_memory, 3)}


def feed_ratios(seconds: float) -> dict:
    out = {name: replay_feed_ratio(name, seconds) for name in REPLAY_AGENTS}
    return {"devices": len(jax.local_devices()), "ratio": {k: v["ratio"] for k, v in out.items()}, "updates_per_s": out}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--in-memory", action="store_true", help="synthetic batches, no replay server (default)")
    mode.add_argument("--replay", action="store_true", help="DQN, PPO and R2D2 fed from a real replay table")
    parser.add_argument(
        "--replay-backend",
        choices=["reverb", "native"],
        default=None,
        help="with --replay: the backend (default: reverb where installed, else native)",
    )
    mode.add_argument(
        "--presets",
        nargs="*",
        metavar="FAMILY",
        choices=sorted(FAMILY_ENVS),
        help="each agent's presets (of these task families; default all): compile seconds and speed",
    )
    parser.add_argument(
        "--agents",
        nargs="+",
        default=None,
        choices=sorted({*CONFIGS, "r2d2"}),
        help=f"default: {' '.join(sorted(CONFIGS))} (with --presets: every agent)",
    )
    parser.add_argument("--configs", nargs="+", default=["default", "large"], choices=["default", "large"])
    parser.add_argument("--seconds", type=float, default=3.0, help="per measurement")
    parser.add_argument("--out", default=None, help="also write the JSON object to this file")
    args = parser.parse_args()
    if args.replay_backend:
        os.environ["SHOAL_BENCH_REPLAY"] = args.replay_backend
    if args.replay:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        out = feed_ratios(args.seconds)
    elif args.presets is not None:
        out = preset_table(args.agents or sorted({*CONFIGS, "r2d2"}), args.presets or sorted(FAMILY_ENVS), args.seconds)
        print(markdown(out), file=sys.stderr)
    else:
        out = in_memory_table(args.agents or sorted(CONFIGS), args.configs, args.seconds)
        print(markdown(out), file=sys.stderr)
    from shoal.core.files import json_text, write_output

    print(json_text(out, "the results"), flush=True)  # (strict JSON; never written through a link)
    if args.out:
        write_output(args.out, json_text(out, args.out, indent=2))


if __name__ == "__main__":
    main()
