"""The walk from ``shoal train`` to the nodes, counted: each check runs once where a run enters,
each process that steps the environment builds it once; a distributed run's driver builds no
vector env (one single env, never reset, to read the spec the nodes are given) and no policy
nor learner: the replay tables' extras come from ``builder.extras_spec``, the action space is
checked on the spec, and the one network definition it makes is the one the learner's memory
estimate traces (shapes only, nothing allocated).

The environment is CartPole behind a registration that counts its constructions (in this
process, and in a file named by ``COUNT_FILE_VAR`` for a run of processes), each under the
label of the node that made it (``driver`` outside a node).
"""

from __future__ import annotations

import collections
import json
import os
import pathlib
import threading

import gymnasium as gym
import pytest

from tests.shoal_cli import run_shoal

ENV_ID = "ShoalSetupCounting-v0"
COUNT_FILE_VAR = "SETUP_TEST_COUNT_FILE"  # (not a SHOAL_* variable: those are checked)
NUM_ENVS, EVAL_EPISODES, BUDGET = 4, 2, 256
ARGS = [
    "--agent",
    "ppo",
    "--num-envs",
    str(NUM_ENVS),
    "--eval-episodes",
    str(EVAL_EPISODES),
    "--max-env-steps",
    str(BUDGET),
    "--eval-every",
    str(BUDGET),
    "--target-return",
    "1e9",
    "--set",
    "rollout_length=16",
    "--quiet",
]
built: collections.Counter = collections.Counter()  # node label -> single envs built (this process)


def _label() -> str:
    from shoal.launch.programs.nodes import current_context

    ctx = current_context()
    return ctx.label if ctx is not None and ctx.label != "launcher" else "driver"


def counted_cartpole(**kwargs):
    """CartPole, counted under the node that builds it."""
    label = _label()
    built[label] += 1
    if os.environ.get(COUNT_FILE_VAR):
        with open(os.environ[COUNT_FILE_VAR], "a") as f:
            f.write(label + "\n")
    return gym.make("CartPole-v1", **kwargs).unwrapped


if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point=f"{__name__}:counted_cartpole", max_episode_steps=500, reward_threshold=475.0)


class Calls:
    """Counts calls of methods, per node label (monkeypatched in: threads of one process)."""

    def __init__(self, monkeypatch) -> None:
        self.counts: collections.Counter = collections.Counter()
        self._monkeypatch, self._inside = monkeypatch, threading.local()

    def count(self, owner, name: str, marks_inside: bool = False) -> None:
        original = getattr(owner, name)

        def counted(*args, **kwargs):
            self.counts[(_label(), name)] += 1
            if name == "make_networks" and getattr(self._inside, "depth", 0):
                self.counts[(_label(), "make_networks for a check")] += 1
            self._inside.depth = getattr(self._inside, "depth", 0) + marks_inside
            try:
                return original(*args, **kwargs)
            finally:
                self._inside.depth -= marks_inside

        self._monkeypatch.setattr(owner, name, counted)

    def of(self, label: str) -> dict[str, int]:
        return {name: n for (who, name), n in self.counts.items() if who == label}


def _count_everything(monkeypatch) -> Calls:
    from shoal.agents.ppo.builder import PPOBuilder
    from shoal.launch.experiments.config import ExperimentConfig
    from shoal.launch.experiments.distributed import preflight
    from shoal.launch.experiments.distributed.settings import LaunchSettings

    calls = Calls(monkeypatch)
    for name in ("validate_settings", "make_env", "environment_spec"):
        calls.count(ExperimentConfig, name)
    calls.count(ExperimentConfig, "validate_agent", marks_inside=True)
    calls.count(preflight, "_check_params_fit_rpc", marks_inside=True)
    calls.count(LaunchSettings, "check")
    for name in ("validate", "make_networks", "make_policy", "make_learner", "make_replay_tables", "extras_spec"):
        calls.count(PPOBuilder, name)
    built.clear()
    return calls


@pytest.mark.e2e
def test_a_one_process_run_builds_its_env_once_and_checks_once(monkeypatch, tmp_path):
    from shoal.launch.experiments.cli.main import main

    calls = _count_everything(monkeypatch)
    assert main(["train", "--env", ENV_ID, *ARGS, "--run-dir", str(tmp_path / "run")]) == 0
    assert built == {"driver": NUM_ENVS + EVAL_EPISODES}  # the training env and the evaluation env, once each
    counts = calls.of("driver")
    assert counts["make_env"] == 2 and counts["validate_settings"] == 1 and counts["validate_agent"] == 1
    assert counts["validate"] == 1 and "check" not in counts  # (no launch settings: one process)
    assert counts["make_policy"] == 2 and counts["make_learner"] == 1  # (acting and evaluation; the learner)


@pytest.mark.e2e
def test_a_distributed_run_checks_once_and_its_driver_builds_one_env_and_no_policy(monkeypatch, tmp_path):
    """``--launcher inprocess``: the nodes are threads of this process, so every call is counted."""
    from shoal.launch.experiments.cli.main import main

    calls = _count_everything(monkeypatch)
    assert (
        main(
            [
                "train",
                "--env",
                ENV_ID,
                *ARGS,
                "--launcher",
                "inprocess",
                "--num-actors",
                "1",
                "--run-dir",
                str(tmp_path / "run"),
            ]
        )
        == 0
    )
    assert built == {"driver": 1, "actor_0": NUM_ENVS, "evaluator": EVAL_EPISODES}, built
    driver = calls.of("driver")
    assert "make_env" not in driver and driver["environment_spec"] == 1  # (one single env, for the spec)
    for check in ("validate_settings", "validate_agent", "validate", "check"):
        assert driver[check] == 1, (check, driver)
    assert "make_policy" not in driver and "make_learner" not in driver
    assert driver["make_networks"] == driver.get("make_networks for a check", 0) == 1, driver  # (traced: memory)
    # the driver makes the tables (plain data: the replay node then loads no agent code)
    assert driver["make_replay_tables"] == driver["extras_spec"] == 1, driver
    nodes = {label: calls.of(label) for label in ("learner", "actor_0", "evaluator", "replay")}
    assert all(
        not any(name.startswith("validate") or name == "check" for name in counts) for counts in nodes.values()
    ), nodes
    assert "make_env" not in nodes["learner"] and nodes["learner"]["make_learner"] == 1
    assert nodes["actor_0"]["make_env"] == 1 and nodes["evaluator"]["make_env"] == 1
    assert nodes["replay"] == {}, nodes["replay"]


@pytest.mark.e2e
@pytest.mark.slow  # (CI time; the inprocess walk above counts the same calls per node: -m slow runs this too)
def test_a_run_of_processes_from_the_cli_builds_the_env_once_per_process_that_steps_it(tmp_path):
    count_file = tmp_path / "built.txt"
    env = dict(
        os.environ,
        PYTHONUNBUFFERED="1",
        PYTHONPATH=os.pathsep.join([str(pathlib.Path(__file__).parent), os.environ.get("PYTHONPATH", "")]),
        **{COUNT_FILE_VAR: str(count_file)},
    )
    proc = run_shoal(
        "train",
        "--env",
        f"{__name__}:{ENV_ID}",
        *ARGS,
        "--launcher",
        "processes",
        "--num-actors",
        "1",
        "--run-dir",
        str(tmp_path / "run"),
        timeout=300,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1])["env_steps"] >= BUDGET
    per_node = collections.Counter(count_file.read_text().split())
    # The driver builds no vector env (one single env, never reset, for the spec); each node that
    # steps one builds it once; the learner and replay build none.
    assert per_node == {"driver": 1, "actor_0": NUM_ENVS, "evaluator": EVAL_EPISODES}, per_node
