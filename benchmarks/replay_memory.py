"""Replay memory of DQN on Atari: bytes per stored env step, and env steps that fit in 8 GB.

    python benchmarks/replay_memory.py [--game Breakout] [--env-steps 20000]
    python benchmarks/replay_memory.py --native [--game Pong] [--env-steps 20000]

``--native``: the native backend in process, twice (each in a fresh process): its frame stacks
stored once (the default: ``shoal.replay.native.frames``) and every column kept as it comes
(``columns.FRAMES = False``: the store before frame pooling). ale-py's ``AtariVectorEnv`` (8 envs,
the DQN atari preset's table, n-step adder) steps with random actions; per env transition
inserted, the bytes the store holds (rows in use and frames held: ``ColumnStore.used_bytes``)
and the growth of the process's resident memory, each with its figure for 1M transitions. The
default (Reverb):

A real DQN actor (the atari preset, acting at random: epsilon 1) steps ale-py's AtariVectorEnv
(8 envs) and its n-step adder writes transitions (``observation`` and ``next_observation``, each
a stack of 4 uint8 84x84 frames) into a real Reverb table in a server process of its own. The
figure is the growth of that process's resident memory per env step inserted (Reverb keeps
chunks zstd-compressed), next to the uncompressed size of a transition; the size of Reverb's
checkpoint of the table is a cross-check. One JSON object on stdout.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import tempfile
import time

from shoal.core.files import json_text

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def _serve(tables_factory, queue, stop) -> None:
    from shoal.replay import ReverbServer, without_insert_blocking

    server = ReverbServer(without_insert_blocking(tables_factory()), checkpoint_dir=tempfile.mkdtemp())
    queue.put(server.port)
    stop.wait()
    server.stop()


def _tables(game: str):
    from shoal.core.specs import make_environment_spec
    from shoal.launch.experiments.config import experiment_config

    config = experiment_config("dqn", f"ALE/{game}-v5")
    env = config.make_env(config.env.num_envs, 0)
    spec = make_environment_spec(env)
    env.close()
    builder = config.builder
    return builder.make_replay_tables(spec, builder.make_policy(builder.make_networks(spec), spec, evaluation=False))


def _rss(pid: int) -> int:
    import psutil

    return psutil.Process(pid).memory_info().rss


def measure(game: str, env_steps: int) -> dict:
    import functools

    import jax
    import numpy as np

    from shoal.actors import EnvironmentLoop
    from shoal.core.specs import make_environment_spec
    from shoal.launch.experiments.config import experiment_config
    from shoal.replay import make_replay_client

    ctx = mp.get_context("spawn")
    queue, stop = ctx.Queue(), ctx.Event()
    server = ctx.Process(target=_serve, args=(functools.partial(_tables, game), queue, stop), daemon=True)
    server.start()
    try:
        port = queue.get(timeout=300)
        client = make_replay_client(f"localhost:{port}")
        config = experiment_config("dqn", f"ALE/{game}-v5", agent_settings={"epsilon_start": 1.0, "epsilon_end": 1.0})
        builder, env = config.builder, config.make_env(config.env.num_envs, 0)
        spec = make_environment_spec(env)
        networks = builder.make_networks(spec)
        policy = builder.make_policy(networks, spec, evaluation=False)
        learner = builder.make_learner(jax.random.PRNGKey(0), networks, iter([]))
        params = learner.get_variables()[1]
        learner.close()

        class Source:
            def get_variables(self, known_version=-1):
                return 0, params

        adder = builder.make_adder(client, spec, policy)
        loop = EnvironmentLoop(
            env, builder.make_actor(jax.random.PRNGKey(1), policy, spec, Source(), adder, asynchronous_updates=False)
        )
        for _ in range(200):  # a first chunk of everything (allocator pools, Reverb's structures)
            loop.step()
        adder.flush()
        before, steps_before = _rss(server.pid), loop.env_steps
        while loop.env_steps - steps_before < env_steps:
            loop.step()
        adder.flush()
        after, inserted = _rss(server.pid), loop.env_steps - steps_before
        items = int(client.server_info()["transitions"].current_size)
        checkpoint = client.checkpoint()
        checkpoint_bytes = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(checkpoint) for f in fs)
        adder.close()
        env.close()
    finally:
        stop.set()
        server.join(30)
        if server.is_alive():
            server.kill()
    per_step = (after - before) / inserted
    frames = int(np.prod(spec.observation.shape))
    return {
        "game": game,
        "env_steps_inserted": inserted,
        "items": items,
        "transition_bytes_uncompressed": 2 * frames + 4 * 4,
        "bytes_per_env_step": round(per_step),
        "checkpoint_bytes_per_env_step": round(checkpoint_bytes / (loop.env_steps)),
        "env_steps_in_8GB": int(8e9 / per_step),
        "compression": round((2 * frames) / per_step, 1),
    }


def _native(game: str, env_steps: int, frames: bool, queue) -> None:
    """(In a process of its own) the native store's bytes per transition, ``frames`` or not."""
    import numpy as np

    from shoal.core.specs import make_environment_spec
    from shoal.core.types import Step
    from shoal.envs.environments import final_observations
    from shoal.launch.experiments.config import experiment_config
    from shoal.replay import without_insert_blocking
    from shoal.replay.native import columns
    from shoal.replay.native.server import NativeReplayServer

    columns.FRAMES = frames
    config = experiment_config("dqn", f"ALE/{game}-v5")
    env = config.make_env(config.env.num_envs, 0)
    spec = make_environment_spec(env)
    builder = config.builder
    server = NativeReplayServer(without_insert_blocking(builder.make_replay_tables(spec)), seed=0)
    adder = builder.make_adder(server.client, spec)
    rng = np.random.default_rng(0)
    observation, _ = env.reset(seed=0)

    adding = [0.0]

    def run(count: int) -> int:
        nonlocal observation
        for _ in range(count):
            action = rng.integers(0, spec.num_actions, spec.num_envs).astype(spec.action.dtype)
            next_obs, reward, terminated, truncated, info = env.step(action)
            final = final_observations(next_obs, terminated, truncated, info)
            start = time.perf_counter()
            adder.add(Step(observation, action, reward, terminated, truncated, final, {}))
            adding[0] += time.perf_counter() - start
            observation = next_obs
        adder.flush()
        return int(server.server_info()["transitions"]["current_size"]) * spec.num_envs

    before_items = run(200)  # (a first chunk of everything: allocator pools, the lookup window)
    before, before_bytes = _rss(os.getpid()), server._store.used_bytes()
    adding[0] = 0.0
    items = run(env_steps // spec.num_envs)
    add_us = adding[0] / (env_steps // spec.num_envs) * 1e6
    after, after_bytes = _rss(os.getpid()), server._store.used_bytes()
    inserted = items - before_items
    per_item, rss_per_item = after_bytes / items, (after - before) / inserted
    result = {
        "frames_pooled": frames,
        "transitions": items,
        "store_bytes": after_bytes,
        "store_bytes_per_transition": round(per_item, 1),
        "rss_bytes_per_transition": round(rss_per_item, 1),
        "frames_held": server._store.frames_held(),
        "store_GB_per_1M_transitions": round(per_item * 1e6 / 1e9, 2),
        "rss_GB_per_1M_transitions": round(rss_per_item * 1e6 / 1e9, 2),
        "store_growth_per_transition": round((after_bytes - before_bytes) / inserted, 1),
        "adder_us_per_vector_step": round(add_us, 1),
    }
    adder.close()
    server.stop()
    env.close()
    queue.put(result)


def measure_native(game: str, env_steps: int) -> dict:
    """``_native`` with frames pooled and without, each in a fresh process."""
    import numpy as np

    ctx = mp.get_context("spawn")
    out: dict = {
        "game": game,
        "backend": "native",
        "env_steps": env_steps,
        "transition_bytes_raw": 2 * 4 * 84 * 84 + 4 * 3,
    }
    for frames in (True, False):
        queue = ctx.Queue()
        child = ctx.Process(target=_native, args=(game, env_steps, frames, queue))
        child.start()
        out["pooled" if frames else "plain"] = queue.get(timeout=3600)
        child.join(60)
    out["ratio_plain_over_pooled"] = round(
        float(np.divide(out["plain"]["store_bytes_per_transition"], out["pooled"]["store_bytes_per_transition"])), 2
    )
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--game", default=None, help="Breakout (Reverb), Pong (--native)")
    parser.add_argument("--env-steps", type=int, default=20_000)
    parser.add_argument("--native", action="store_true", help="the native backend, frames pooled and not")
    parser.add_argument("--out", default=None, help="also write the JSON here")
    args = parser.parse_args()
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    if args.native:
        result = measure_native(args.game or "Pong", args.env_steps)
    else:
        result = measure(args.game or "Breakout", args.env_steps)
    text = json_text(result)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    print(text, flush=True)
