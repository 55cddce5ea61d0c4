"""Throughput ratios and latencies, each measured within one run: prints one JSON object.

    python benchmarks/throughput.py [--quick] [--out results/throughput.json]

* ``actor_efficiency``: actor-loop env steps/s (``EnvironmentLoop`` on CartPole-v1, 16 envs, the
  DQN policy and its n-step adder writing to a real Reverb table) / raw vector-env steps/s with
  random actions; ``actor_policy_efficiency`` is the same without the adder; ``actor_step_us``:
  what one vector step of the former cost, microseconds per component of the loop's time
  breakdown (``raw_env_step``: the raw env's step, for comparison).
  ``actor_efficiency_atari`` (with ``--atari``): the same on ALE/Breakout-v5 with 8 envs and
  DQN's ``atari`` preset (the Nature CNN, 1-step transitions of 84x84x4 frames). The loops step
  their envs as ``--actor-overlap`` says (default ``auto``: a thread for Atari, else on the loop's thread).
* ``actor_scaling``: 1, 2, 4, 8, 16 actor processes on a latency-bound env (CartPole with a 1 ms
  sleep per env step, 16 envs per actor), all feeding one real replay server (``--replay-backend``'s,
  served as a distributed run's replay node serves it: ``actor_scaling_backend``): total steps/s /
  (N x the 1-actor figure). The 16 processes start once; phases switch N of them on.
* ``learner_feed_ratio``: DQN and PPO updates/s fed from Reverb (a filled table, the real
  dataset iterator and device prefetch) / the same jitted update on a batch already on the
  devices; ``learner_feed_ratio_2_devices`` the same with 2 forced CPU devices (a subprocess).
* ``rpc``: ``get_variables`` p50/p99 latency, 1M float32 params, 1 and 32 concurrent clients,
  as actors on the learner's host fetch them (shared memory, one copy per read);
  ``rpc_grpc``: the same over gRPC (actors on other hosts).

* ``atari_training_ratio`` (with ``--atari``; the atari extra): ``shoal train --agent ppo --env
  ALE/Breakout-v5`` env steps/s (8 envs, one process, evaluation off, a fixed budget; the rate
  once the update is compiled: from the second half of its ``train.csv``) / ``AtariVectorEnv``'s
  random-action steps/s with the same 8 envs, measured in the same run. Its ``time_breakdown``
  says where the training run's time went.

``--quick`` (short windows; about a minute on 2 cores) prints the same keys.

A part that fails (e.g. a scaling actor process that died, or did not report in time) is one
line on stderr, ``[throughput] <part> failed: <why>``, and under ``failed`` in the JSON, which
holds what the other parts measured; the exit status is then 1.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
HERE = os.path.dirname(os.path.abspath(__file__))


def actor_efficiency(seconds: float, atari: bool = False, overlap: str = "auto") -> dict:
    from actor_bench import actor_rates  # (benchmarks/ helpers)

    if atari:
        from shoal.agents.presets import find_preset

        env_id, num_envs, suffix = "ALE/Breakout-v5", 8, "_atari"
        settings = find_preset("dqn", env_id).settings
    else:
        env_id, num_envs, suffix, settings = "CartPole-v1", 16, "", {}
    rates, costs = actor_rates(env_id, num_envs, seconds, overlap=overlap, **settings)
    return {
        f"actor_efficiency{suffix}": round(rates["actor_adder_sps"] / rates["raw_env_sps"], 3),
        f"actor_policy_efficiency{suffix}": round(rates["actor_sps"] / rates["raw_env_sps"], 3),
        f"actor_sps{suffix}": {k: round(v) for k, v in rates.items()},
        f"actor_step_us{suffix}": costs,
    }


def _scaling_actor(index: int, server: tuple, ready, go, start_at, phase_s: float, scaling, out) -> None:
    """One scaling actor process: puts ``(index, env steps per phase)`` on ``out``, or
    ``(index, "why it failed")`` (its exception, in one line) on ``ready`` and ``out``."""
    try:
        from actor_bench import scaling_actor_steps

        out.put((index, scaling_actor_steps(index, server, ready, go, start_at, phase_s, scaling)))
    except BaseException as e:  # noqa: BLE001 -- the parent names it, in one line (whichever queue it waits on)
        ready.put((index, _line(e)))
        out.put((index, _line(e)))


def _line(error: BaseException) -> str:
    """``Type: the first line of its message``."""
    first = (str(error).strip().splitlines() or [""])[0]
    return f"{type(error).__name__}: {first}" if first else type(error).__name__


def _gather(queue, procs, timeout_s: float, what: str) -> dict[int, object]:
    """``{index: what process index put}``, one item per process in ``procs`` (each puts its
    index first); raises ``RuntimeError`` (one line) naming a process that ended without
    putting one, or those still running without one after ``timeout_s``."""
    import queue as queues

    got: dict[int, object] = {}
    deadline = time.monotonic() + timeout_s
    while len(got) < len(procs):
        try:
            item = queue.get(timeout=0.5)
        except queues.Empty:
            missing = [i for i in range(len(procs)) if i not in got]
            dead = [i for i in missing if procs[i].exitcode not in (None, 0)]
            if dead:
                raise RuntimeError(
                    f"actor process {dead[0]} exited with code {procs[dead[0]].exitcode} before it {what}"
                ) from None
            if time.monotonic() > deadline:
                raise RuntimeError(f"actor processes {missing} did not {what} within {timeout_s:g}s") from None
            continue
        index, value = item if isinstance(item, tuple) else (item, item)
        if isinstance(value, str):
            raise RuntimeError(f"actor process {index} failed: {value}")
        got[index] = value
    return got


def actor_scaling(phase_s: float, scaling: tuple[int, ...]) -> dict:
    from actor_bench import replay_backend, scaling_table
    from replay_throughput import serve

    from shoal.replay.backends import check_backend

    backend = check_backend(replay_backend())
    _, address, token, stop_server = serve(backend, [scaling_table()])
    ctx = mp.get_context("spawn")
    ready, results, go, start_at = ctx.Queue(), ctx.Queue(), ctx.Event(), ctx.Value("d", 0.0)
    # Each actor process: one XLA thread on the CPU (as the distributed program's actors).
    os.environ.update(
        {"JAX_PLATFORMS": "cpu", "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"}
    )
    procs = [
        ctx.Process(
            target=_scaling_actor,
            daemon=True,
            args=(i, (backend, address, token), ready, go, start_at, phase_s, scaling, results),
        )
        for i in range(scaling[-1])
    ]
    try:
        for p in procs:
            p.start()
        _gather(ready, procs, 300, "was built and compiled")  # every actor built and compiled
        start_at.value = time.time() + 0.5
        go.set()
        steps = list(_gather(results, procs, phase_s * len(scaling) + 120, "reported its steps").items())
    finally:
        for p in procs:
            if p.pid is None:  # (never started: the start of an earlier one failed)
                continue
            p.join(10)
            if p.is_alive():
                p.kill()
        stop_server()
    totals = [sum(per_phase[k] for _, per_phase in steps) / phase_s for k in range(len(scaling))]
    return {
        "actor_scaling": {str(n): round(total / (n * totals[0]), 3) for n, total in zip(scaling, totals)},
        "actor_scaling_sps": {str(n): round(total) for n, total in zip(scaling, totals)},
        "actor_scaling_backend": backend,
    }


def learner_feed(seconds: float, devices: int) -> dict:
    if devices == 1:
        from learner_bench import feed_ratios

        return feed_ratios(seconds)
    env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}", JAX_PLATFORMS="cpu")
    proc = subprocess.run(
        [sys.executable, os.path.join(HERE, "learner_bench.py"), "--replay", "--seconds", str(seconds)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    if proc.returncode:
        raise RuntimeError(
            f"the {devices}-device learner benchmark failed (exit {proc.returncode}): {_last_line(proc.stderr)}"
        )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def rpc(calls: int) -> dict:
    """``rpc``: what an actor on the learner's host sees (shared memory); ``rpc_grpc``: the
    gRPC path (actors on other hosts)."""
    from rpc import measure_latencies

    out = measure_latencies(1_000_000, calls)
    return {
        key: {
            str(r["clients"]): {"p50_ms": round(r["p50_ms"], 2), "p99_ms": round(r["p99_ms"], 2)}
            for r in out
            if r["path"] == path
        }
        for key, path in (("rpc", "shared_memory"), ("rpc_grpc", "grpc"))
    }


def atari_training_ratio(env_steps: int, seconds: float, num_envs: int = 8) -> dict:
    import csv
    import tempfile

    import numpy as np

    from shoal.envs.environments import make_atari_vector_env

    env = make_atari_vector_env("ALE/Breakout-v5", num_envs, seed=0)
    env.step(env.action_space.sample())
    steps, started = 0, time.monotonic()
    while time.monotonic() - started < seconds:
        env.step(env.action_space.sample())
        steps += num_envs
    raw_sps = steps / (time.monotonic() - started)
    env.close()
    run_dir = os.path.join(tempfile.mkdtemp(prefix="shoal-atari-ratio-"), "run")
    cmd = [
        sys.executable,
        "-m",
        "shoal",
        "train",
        "--agent",
        "ppo",
        "--env",
        "ALE/Breakout-v5",
        "--seed",
        "0",
        "--num-envs",
        str(num_envs),
        "--max-env-steps",
        str(env_steps),
        "--eval-every",
        str(10 * env_steps),
        "--target-return",
        "1e12",
        "--run-dir",
        run_dir,
        "--quiet",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"shoal train failed (exit {proc.returncode}): {_last_line(proc.stderr)}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    with open(os.path.join(run_dir, "train.csv")) as f:
        rows = list(csv.DictReader(f))
    steady = [float(r["steps_per_s"]) for r in rows[len(rows) // 2 :]]
    train_sps = float(np.mean(steady)) if steady else result["env_steps"] / result["train_s"]
    return {
        "atari_training_ratio": round(train_sps / raw_sps, 3),
        "atari": {
            "train_env_steps_per_s": round(train_sps, 1),
            "random_env_steps_per_s": round(raw_sps, 1),
            "num_envs": num_envs,
            "env_steps": result["env_steps"],
            "wall_s": result["wall_s"],
            "time_breakdown": result.get("time_breakdown"),
            "run_dir": run_dir,
        },
    }


def _last_line(text: str) -> str:
    """The last line of ``text`` that is not blank (a failed subprocess's last word)."""
    return next((line.strip() for line in reversed(text.splitlines()) if line.strip()), "(no output)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="short windows (same keys)")
    parser.add_argument("--out", default=None, help="also write the JSON object to this file")
    parser.add_argument("--scaling", type=int, nargs="+", default=[1, 2, 4, 8, 16], help="actor counts")
    parser.add_argument(
        "--learner-devices",
        type=int,
        nargs="+",
        default=[1, 2],
        choices=[1, 2],
        help="learner_feed_ratio on 1 device and/or 2 forced CPU devices (default: both)",
    )
    parser.add_argument("--window", type=float, default=None, help="seconds per measurement (overrides)")
    parser.add_argument(
        "--atari", action="store_true", help="also actor_efficiency_atari and atari_training_ratio (the atari extra)"
    )
    parser.add_argument("--only-atari", action="store_true", help="atari_training_ratio alone")
    parser.add_argument("--atari-steps", type=int, default=None, help="PPO Breakout budget (default 32768; quick 8192)")
    parser.add_argument(
        "--replay-backend",
        choices=["reverb", "native"],
        default=None,
        help="the replay backend of actor_efficiency and learner_feed_ratio (default: reverb "
        "where installed, else native)",
    )
    parser.add_argument(
        "--actor-overlap",
        choices=["auto", "off", "thread", "process"],
        default="auto",
        help="how the actor loops of actor_efficiency step their envs (EnvironmentLoop's overlap; default "
        "auto, as a distributed run's actors: actor_step_us names what it resolved to)",
    )
    parser.add_argument("--verbose", action="store_true", help="keep Reverb's and TensorFlow's log lines")
    args = parser.parse_args()
    if args.scaling[0] != 1:
        parser.error("--scaling must start at 1 (the other counts are relative to one actor)")
    sys.path.insert(0, HERE)
    if args.replay_backend:
        os.environ["SHOAL_BENCH_REPLAY"] = args.replay_backend  # (actor_bench.replay_backend; subprocesses too)
    if not args.verbose:
        from shoal.core.native_log_filter import drop_native_log_lines

        drop_native_log_lines()
    window = args.window or (0.75 if args.quick else 4.0)
    phase = args.window or (1.5 if args.quick else 5.0)
    started, out = time.monotonic(), {"quick": args.quick, "cpu_count": os.cpu_count()}
    parts = [
        ("actor", lambda: actor_efficiency(window, overlap=args.actor_overlap)),
        *([("actor_atari", lambda: actor_efficiency(window, True, args.actor_overlap))] if args.atari else []),
        ("rpc", lambda: rpc(10 if args.window else 40 if args.quick else 200)),
        ("learner", lambda: _learner(window, args.learner_devices)),
        ("scaling", lambda: actor_scaling(phase, tuple(args.scaling))),
    ]
    atari = (
        "atari",
        lambda: atari_training_ratio(
            args.atari_steps or (8_192 if args.quick else 32_768), 3.0 if args.quick else 10.0
        ),
    )
    parts = [atari] if args.only_atari else parts + [atari] if args.atari else parts
    failed: dict[str, str] = {}
    for name, measure in parts:
        print(f"[throughput] measuring {name} ...", file=sys.stderr, flush=True)
        try:
            out.update(measure())
        except Exception as e:  # noqa: BLE001 -- one line, and the other parts are measured all the same
            failed[name] = _line(e)
            print(f"[throughput] {name} failed: {failed[name]}", file=sys.stderr, flush=True)
    if failed:
        out["failed"] = failed
    out["seconds"] = round(time.monotonic() - started, 1)
    from shoal.core.files import json_text, write_output

    print(json_text(out, "the results"), flush=True)  # (strict JSON; never written through a link)
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        write_output(args.out, json_text(out, args.out, indent=2))
    if failed:
        sys.exit(1)


def _learner(window: float, devices: list[int]) -> dict:
    out: dict = {"learner_updates_per_s": {}}
    for n in devices:
        fed = learner_feed(window, n)
        out["learner_feed_ratio" if n == 1 else f"learner_feed_ratio_{n}_devices"] = fed["ratio"]
        out["learner_updates_per_s"]["1_device" if n == 1 else f"{n}_devices"] = fed["updates_per_s"]
    return out


if __name__ == "__main__":
    main()
