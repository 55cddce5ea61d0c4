"""Reverb beside native replay, every figure in one run: prints one JSON object.

    python benchmarks/replay_backends.py [--quick] [--backends reverb,native] [--seeds 0 1 2] [--out FILE]

For each backend this Python has (Reverb: Python 3.11 only):

* ``actor_efficiency``: actor-loop env steps/s (CartPole-v1, 16 envs, the DQN policy and its
  n-step adder writing to a real table of the backend) / the raw vector env's random-action
  steps/s (``throughput.py``'s measure, ``actor_bench.actor_rates``), and what a vector step cost
  per component (``replay_insert`` is the adder's write);
* ``learner_feed_ratio``: DQN, PPO and R2D2 updates/s fed from a filled table of the backend
  (the real dataset iterator and device prefetch) / the same update on a batch already on the
  devices (``learner_bench.feed_ratios``);
* ``insert`` / ``sample``: ``replay_throughput.py`` (writer and sampler processes, CartPole- and
  Atari-sized items);
* ``solve``: ``shoal train --agent A --env CartPole-v1 --seed S --replay B`` for DQN and PPO, as a
  user runs it (a whole process): solved or not, env steps, ``wall_s``, ``process_s``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def in_process(backend: str, seconds: float) -> dict:
    """actor_efficiency and learner_feed_ratio on ``backend`` (a subprocess: a fresh JAX)."""
    code = f"""
import json, os, sys
os.environ["SHOAL_BENCH_REPLAY"] = {backend!r}
sys.path.insert(0, {HERE!r})
from actor_bench import actor_rates
from learner_bench import feed_ratios
rates, costs = actor_rates("CartPole-v1", 16, {seconds})
feed = feed_ratios({seconds / 4})
print(json.dumps({{"actor_efficiency": round(rates["actor_adder_sps"] / rates["raw_env_sps"], 3),
                  "actor_sps": {{k: round(v) for k, v in rates.items()}}, "actor_step_us": costs,
                  "learner_feed_ratio": feed["ratio"], "learner_updates_per_s": feed["updates_per_s"]}}))
"""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=1200)
    if proc.returncode:
        raise RuntimeError(f"{backend}: {proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def throughput(backend: str, quick: bool) -> dict:
    command = [sys.executable, os.path.join(HERE, "replay_throughput.py"), "--backends", backend]
    proc = subprocess.run(command + (["--quick"] if quick else []), capture_output=True, text=True, timeout=1800)
    if proc.returncode:
        raise RuntimeError(f"{backend} throughput: {proc.stderr[-3000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return {k.split("/", 1)[1]: v for k, v in out.items() if k.startswith(backend + "/")}


def solve(backend: str, agent: str, seed: int, run_root: str) -> dict:
    run_dir = os.path.join(run_root, f"{backend}-{agent}-s{seed}")
    command = [
        sys.executable,
        "-m",
        "shoal",
        "train",
        "--agent",
        agent,
        "--env",
        "CartPole-v1",
        "--seed",
        str(seed),
        "--replay",
        backend,
        "--quiet",
        "--run-dir",
        run_dir,
    ]
    started = time.monotonic()
    proc = subprocess.run(command, capture_output=True, text=True, timeout=1800)
    if proc.returncode:
        raise RuntimeError(f"{' '.join(command)}: {proc.stderr[-3000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    return {
        "solved": result["solved"],
        "env_steps": result["env_steps"],
        "wall_s": result["wall_s"],
        "process_s": result.get("process_s", round(time.monotonic() - started, 3)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="short windows, seed 0 only")
    parser.add_argument("--backends", default=None, help="comma-separated (default: every installed one)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--seconds", type=float, default=8.0, help="actor window (the feed ratio takes a quarter)")
    parser.add_argument("--out", default=None, help="also write the JSON here")
    args = parser.parse_args()
    sys.path.insert(0, os.path.dirname(HERE))
    import tempfile

    from shoal.replay import reverb_installed

    backends = args.backends.split(",") if args.backends else (["reverb"] if reverb_installed() else []) + ["native"]
    seeds = args.seeds[:1] if args.quick else args.seeds
    seconds = 2.0 if args.quick else args.seconds
    run_root = tempfile.mkdtemp(prefix="shoal-replay-backends-")
    result: dict = {"python": sys.version.split()[0]}
    for backend in backends:
        figures = in_process(backend, seconds)
        figures.update({"throughput": throughput(backend, args.quick)})
        figures["solve"] = {
            f"{agent}/s{seed}": solve(backend, agent, seed, run_root) for agent in ("dqn", "ppo") for seed in seeds
        }
        result[backend] = figures
        print(json.dumps({backend: figures}), file=sys.stderr, flush=True)
    from shoal.core.files import json_text, write_output

    text = json_text(result)
    print(text)
    if args.out:
        write_output(args.out, text)


if __name__ == "__main__":
    main()
