"""Action masks on Taxi-v4: the same agent with and without the env's masks, per seed, and the
masked actions each run took (counted by a wrapper around every env of the run, training and
evaluation alike). Prints one JSON object per run, then a summary JSON line.

    python benchmarks/masks.py                                   # PPO, seeds 0-2, 200k steps each
    python benchmarks/masks.py --agent dqn --seeds 0 --max-env-steps 50000 --time-limit-s 120

A run stops when a greedy evaluation's mean return over 10 episodes reaches Taxi-v4's
``reward_threshold`` (8; the optimum is about 8.5), when its step budget is spent, or after
``--time-limit-s`` (``"terminated"`` in its record). ``env_steps_to_threshold`` is ``null`` for a
run that did not reach it. The masked runs must take no masked action (``masked_actions_taken:
0``); the unmasked ones show how often an agent without masks takes them.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading

import gymnasium as gym

from shoal.core.files import json_text

TAXI_THRESHOLD = 8.0
COUNTS = {"taken": 0, "masked": 0}  # every env of this process (one-process runs)
SETTINGS = {  # tuned by hand for Taxi-v4 (one-hot states; a -1 per step, -10 for an illegal pickup or drop-off)
    "dqn": {
        "learning_rate": 1e-3,
        "epsilon_decay_steps": 20_000,
        "epsilon_end": 0.05,
        "samples_per_insert": 8.0,
        "target_update_period": 250,
        "hidden_sizes": (64, 64),
    },
    "ppo": {"learning_rate": 1e-3, "entropy_coef": 0.01, "rollout_length": 64, "num_minibatches": 4, "num_epochs": 4},
}


class CountMaskedActions(gym.Wrapper):
    """Counts the actions taken that the env's last ``info["action_mask"]`` disallowed."""

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        self._mask = info["action_mask"]
        return obs, info

    def step(self, action):
        COUNTS["taken"] += 1
        COUNTS["masked"] += int(not self._mask[int(action)])
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._mask = info["action_mask"]
        return obs, reward, terminated, truncated, info


def counted_taxi() -> gym.Env:
    """Taxi-v4 behind ``CountMaskedActions`` (an ``env_factory``)."""
    return CountMaskedActions(gym.make("Taxi-v4"))


def run(agent: str, seed: int, masked: bool, max_env_steps: int, time_limit_s: float) -> dict:
    from shoal.agents import get_builder
    from shoal.launch import ExperimentConfig, run_experiment

    COUNTS.update(taken=0, masked=0)
    config = ExperimentConfig.from_flat(
        builder=get_builder(agent, **SETTINGS[agent]),
        env_id="Taxi-v4",
        env_factory=counted_taxi,
        action_masks=masked,
        seed=seed,
        num_envs=8,
        max_env_steps=max_env_steps,
        eval_every=2_500,
        eval_episodes=10,
        target_return=TAXI_THRESHOLD,
        progress=False,
    )
    stop = threading.Event()
    timer = threading.Timer(time_limit_s, stop.set)
    timer.start()
    try:
        result = run_experiment(config, stop)
    finally:
        timer.cancel()
    return {
        "agent": agent,
        "seed": seed,
        "masked": masked,
        "solved": result["solved"],
        "env_steps_to_threshold": result["env_steps"] if result["solved"] else None,
        "env_steps": result["env_steps"],
        "final_eval_return": result["final_eval_return"],
        "masked_actions_taken": COUNTS["masked"],
        "actions_taken": COUNTS["taken"],
        "wall_s": result["wall_s"],
        **({"terminated": "time limit"} if "terminated" in result else {}),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agent", choices=sorted(SETTINGS), default="ppo")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--max-env-steps", type=int, default=200_000)
    parser.add_argument("--time-limit-s", type=float, default=240.0, help="per run")
    args = parser.parse_args()
    records = []
    for seed in args.seeds:
        for masked in (True, False):
            records.append(run(args.agent, seed, masked, args.max_env_steps, args.time_limit_s))
            print(json_text(records[-1]), flush=True)
    summary = {"agent": args.agent, "env": "Taxi-v4", "threshold": TAXI_THRESHOLD, "max_env_steps": args.max_env_steps}
    for masked in (True, False):
        runs = [r for r in records if r["masked"] == masked]
        solved = [r["env_steps_to_threshold"] for r in runs if r["solved"]]
        summary["masked" if masked else "unmasked"] = {
            "solved": f"{len(solved)}/{len(runs)}",
            "median_env_steps_to_threshold": statistics.median(solved) if solved else None,
            "env_steps_to_threshold": [r["env_steps_to_threshold"] for r in runs],
            "masked_actions_taken": sum(r["masked_actions_taken"] for r in runs),
        }
    print(json_text(summary), flush=True)
    if any(r["masked_actions_taken"] for r in records if r["masked"]):
        sys.exit("a masked run took a masked action")


if __name__ == "__main__":
    main()
