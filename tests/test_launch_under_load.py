"""A distributed run on a busy machine reaches its budget, counts every actor, and ends cleanly.

A 2-actor run of the ``processes`` launcher with every core kept busy by spinning processes for
the whole run, where the actor holding the rest of the budget waits in a step longer than the
evaluator used to allow (a step held up as by a learner that the load slows down: the actor is
alive, and is waited for, not taken for frozen). It reaches its budget, counts both actors in
the result (``num_actors``, ``time_breakdown``), and leaves no traceback in any node's log. (A
frozen actor still ends the run short of its budget: tests/faults/test_supervision.py.) And the
result counts an actor that left no summary.

Also the env the first one runs, registered on import (``--env
tests.test_launch_under_load:WaitsOnce-v0``): CartPole whose first step in an actor's process
waits ``wait_s`` seconds.
"""

import json
import os
import subprocess
import sys
import time

import gymnasium as gym
import pytest
from gymnasium.envs.classic_control.cartpole import CartPoleEnv

from shoal.launch.experiments.distributed.results import program_result
from tests.faults.harness import SMALL
from tests.shoal_cli import run_shoal

WAITS_ONCE = "WaitsOnce-v0"


class WaitsOnce(CartPoleEnv):
    """CartPole whose first step in an actor's process (one env of its vector env) waits
    ``wait_s`` seconds; every other step, and every step elsewhere (the evaluator), is CartPole's."""

    waited = False  # (per process)

    def __init__(self, wait_s=8.0, **kwargs):
        super().__init__(**kwargs)
        self._wait_s = float(wait_s)

    def step(self, action):
        from shoal.launch.programs.nodes import current_context

        ctx = current_context()
        if not WaitsOnce.waited and ctx is not None and ctx.label.startswith("actor_"):
            WaitsOnce.waited = True
            time.sleep(self._wait_s)
        return super().step(action)


if WAITS_ONCE not in gym.registry:
    gym.register(WAITS_ONCE, entry_point=WaitsOnce, max_episode_steps=500)


def _train(run_dir, budget, *args):
    """A 2-actor ``processes`` run of ``budget`` env steps: (its result, its stderr)."""
    proc = run_shoal(
        "train",
        *SMALL,
        "--launcher",
        "processes",
        "--num-actors",
        "2",
        "--max-env-steps",
        str(budget),
        "--eval-every",
        str(10 * budget),
        "--run-dir",
        str(run_dir),
        *args,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


@pytest.fixture
def busy_cores():
    """A process spinning on each core, for the whole test, at the lowest priority (``nice 19``):
    every core is busy, yet a test that another pytest-xdist worker runs beside this one is not
    starved past its own deadlines (an unniced pair once held a neighbour's distributed run
    short of its first checkpoint for 120 s, and this run's learner compiling for 73 s)."""
    spin = "import os\nos.nice(19)\nwhile True: pass"
    hogs = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(os.cpu_count() or 1)]
    yield
    for hog in hogs:
        hog.kill()
        hog.wait()


@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_a_two_actor_run_on_a_busy_machine_reaches_its_budget_and_ends_cleanly(tmp_path, busy_cores):
    # 128 env steps: the first grant (16 vector steps of 8 envs: StepGrants) is the whole budget,
    # and its holder's first step waits 8 s (as a step does whose write waits on a learner that
    # the load slows down): no step is reported for longer than the 5 s after which the
    # evaluator used to end the run, short by what that alive actor held.
    run_dir = tmp_path / "run"
    result, stderr = _train(
        run_dir, 128, "--env", f"tests.test_launch_under_load:{WAITS_ONCE}", "--set", "min_replay_size=64"
    )
    assert 128 <= result["env_steps"] < 128 + 8, stderr[-3000:]  # (8 envs: one vector step past it at most)
    assert "env_steps_held" not in result and "shoal: warning" not in stderr, stderr[-3000:]
    assert result["num_actors"] == 2, result
    assert {"actor_0", "actor_1"} <= set(result["time_breakdown"]), result["time_breakdown"]
    logs = {name: (run_dir / "logs" / name).read_text() for name in os.listdir(run_dir / "logs")}
    assert not [name for name, text in logs.items() if "Traceback" in text], logs


def test_the_result_counts_an_actor_that_left_no_summary():
    """One killed at the end (or stopped while it was starting) ran all the same."""
    summaries = {
        "actor_0": {"time_s": {"env_step": 1.0}, "wall_s": 2.0, "env_steps": 64, "steps_per_s": 32.0},
        "learner": {"time_s": {"sgd_update": 1.0}, "wall_s": 2.0},
    }
    result = program_result(
        {"result": {"env_steps": 64}},
        summaries,
        terminated=None,
        checkpointed=None,
        saved=None,
        launched_at=0.0,
        actor_counts=[],
        autoscale_mode=None,
        actors_ran={"actor_0": "stopped", "actor_1": "killed"},
    )
    assert result["num_actors"] == 2 and result["actors_without_summary"] == {"actor_1": "killed"}
    assert result["time_breakdown"]["actor_1"] == {"other": 1.0}
    assert list(result["time_breakdown"]) == ["actor_0", "actor_1", "learner"]


def test_the_evaluator_takes_for_frozen_only_holders_whose_heartbeat_stopped(monkeypatch):
    from types import SimpleNamespace

    from shoal.launch.experiments.distributed import evaluator_worker
    from shoal.launch.experiments.distributed.step_grants import ALIVE, GRANTED, STALL_S, holders

    now = [100.0]
    monkeypatch.setattr(evaluator_worker, "time", SimpleNamespace(monotonic=lambda: now[0]))
    beats = evaluator_worker.Heartbeats()
    counts = {GRANTED + "actor_0": 128, GRANTED + "actor_1": 64, ALIVE + "actor_0": 1, ALIVE + "actor_1": 1}
    beats.saw(counts)
    now[0] += STALL_S + 1  # no step reported all that while; actor_0 beats on (its step waits), actor_1 froze
    counts[ALIVE + "actor_0"] += 20
    beats.saw(counts)
    assert beats.frozen(holders(counts)) == {}  # (an actor that waits is waited for)
    counts["env_steps_settled_actor_0"] = 128  # it took its steps and reported them: only actor_1 holds any
    assert beats.frozen(holders(counts)) == {"actor_1": 64}
