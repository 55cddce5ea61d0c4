"""Replay memory of DQN on Atari: bytes per stored env step, and env steps that fit in 8 GB.

    python benchmarks/replay_memory.py [--game Breakout] [--env-steps 20000]

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

from shoal.core.files import json_text

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def _serve(tables_factory, queue, stop) -> None:
    from shoal.replay import ReplayServer, without_insert_blocking

    server = ReplayServer(without_insert_blocking(tables_factory()), checkpoint_dir=tempfile.mkdtemp())
    queue.put(server.port)
    stop.wait()
    server.stop()


def _tables(game: str):
    from shoal.core.specs import make_environment_spec
    from shoal.launch.experiments.config import experiment_config

    config = experiment_config("dqn", f"ALE/{game}-v5")
    env = config.make_env(config.num_envs, 0)
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
        builder, env = config.builder, config.make_env(config.num_envs, 0)
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
        loop = EnvironmentLoop(env, builder.make_actor(jax.random.PRNGKey(1), policy, spec, Source(), adder,
                                                       asynchronous_updates=False))
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
    return {"game": game, "env_steps_inserted": inserted, "items": items,
            "transition_bytes_uncompressed": 2 * frames + 4 * 4,
            "bytes_per_env_step": round(per_step), "checkpoint_bytes_per_env_step": round(checkpoint_bytes / (loop.env_steps)),
            "env_steps_in_8GB": int(8e9 / per_step), "compression": round((2 * frames) / per_step, 1)}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--game", default="Breakout")
    parser.add_argument("--env-steps", type=int, default=20_000)
    args = parser.parse_args()
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    print(json_text(measure(args.game, args.env_steps)), flush=True)
