"""Autoscaled actors against fixed counts, in one run: prints one JSON object.

    python benchmarks/autoscale.py [--seconds 90] [--quick] [--out results/autoscale.json]

For each scenario -- an actor-bound one (PPO on CartPole-v1) and a learner-bound one (DQN on
LunarLander-v3) -- it runs ``shoal train --launcher processes`` with 1, 2 and 4 fixed actors and
with ``--num-actors auto:1-4`` (starting from 1), each for ``--seconds`` of wall time (then
SIGTERM), and reads the progress lines as they arrive (``env_steps`` stamped with the time
they were read). Per run:

* ``steady_steps_per_s``: env steps/s over the last third of the run;
* auto runs: ``reached_s`` -- seconds from the command until env steps/s over a 15 s window
  first reached 0.9 of the best fixed count's steady figure (``null``: never);
  ``ratio_to_best_fixed`` -- its steady figure over the best fixed count's; ``actor_counts``
  -- each change and its reason (the result's), ``final_actors``.

Goal (issue 25): ``ratio_to_best_fixed >= 0.9``, ``reached_s <= 60``, and on the learner-bound
scenario no actor kept that does not raise throughput.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SCENARIOS = {"actor_bound": ("ppo", "CartPole-v1"), "learner_bound": ("dqn", "LunarLander-v3")}


def run(agent: str, env: str, num_actors: str, seconds: float, seed: int = 0) -> dict:
    """One ``shoal train`` for ``seconds``; its progress samples and its result."""
    run_dir = tempfile.mkdtemp(prefix="shoal-autoscale-")
    cmd = [
        sys.executable,
        "-m",
        "shoal",
        "train",
        "--agent",
        agent,
        "--env",
        env,
        "--launcher",
        "processes",
        "--num-actors",
        num_actors,
        "--max-env-steps",
        str(10**9),
        "--eval-every",
        str(10**9),
        "--seed",
        str(seed),
        "--run-dir",
        run_dir,
    ]
    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=os.path.dirname(HERE))
    samples: list[tuple[float, int]] = []

    def read() -> None:
        for line in proc.stderr:
            if line.startswith("[train] env_steps"):
                samples.append((time.monotonic() - start, int(line.split()[2].replace(",", ""))))
            elif line.startswith("shoal: autoscale"):
                print(f"  {line.strip()}", file=sys.stderr, flush=True)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    time.sleep(seconds)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=300)
    reader.join(timeout=10)
    result = json.loads(out.strip().splitlines()[-1])
    return {"samples": samples, "result": result}


def rate(samples: list[tuple[float, int]], since: float, until: float) -> float:
    """Env steps/s between the samples nearest ``since`` and ``until`` (seconds from the start)."""
    inside = [(t, n) for t, n in samples if since <= t <= until]
    if len(inside) < 2 or inside[-1][0] <= inside[0][0]:
        return 0.0
    return (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])


def scenario(agent: str, env: str, seconds: float) -> dict:
    rows = {}
    for num_actors in ("1", "2", "4", "auto:1-4"):
        print(f"{agent} {env} --num-actors {num_actors} ({seconds:g} s)", file=sys.stderr, flush=True)
        out = run(agent, env, num_actors, seconds)
        rows[num_actors] = {
            "steady_steps_per_s": round(rate(out["samples"], seconds * 2 / 3, seconds), 1),
            "samples": out["samples"],
            "result": out["result"],
        }
    best = max(("1", "2", "4"), key=lambda k: rows[k]["steady_steps_per_s"])
    target = 0.9 * rows[best]["steady_steps_per_s"]
    auto = rows["auto:1-4"]
    reached = next((t for t, _ in auto["samples"] if t >= 15 and rate(auto["samples"], t - 15, t) >= target), None)
    summary = {f"fixed_{k}": rows[k]["steady_steps_per_s"] for k in ("1", "2", "4")}
    summary.update(
        best_fixed=int(best),
        auto=auto["steady_steps_per_s"],
        ratio_to_best_fixed=round(auto["steady_steps_per_s"] / max(rows[best]["steady_steps_per_s"], 1e-9), 3),
        reached_s=None if reached is None else round(reached, 1),
        final_actors=auto["result"].get("num_actors"),
        actor_counts=auto["result"].get("actor_counts"),
    )
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=90.0, help="wall seconds per run (default 90)")
    parser.add_argument("--quick", action="store_true", help="30 s per run, the actor-bound scenario only")
    parser.add_argument("--out", help="also write the JSON here")
    args = parser.parse_args()
    seconds = 30.0 if args.quick else args.seconds
    names = ["actor_bound"] if args.quick else list(SCENARIOS)
    report = {
        "seconds_per_run": seconds,
        "cores": os.cpu_count(),
        **{name: scenario(*SCENARIOS[name], seconds) for name in names},
    }
    from shoal.core.files import json_text, write_output

    text = json_text(report, "the report", indent=1)  # (strict JSON; never written through a link)
    print(text)
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        write_output(args.out, text + "\n")


if __name__ == "__main__":
    main()
