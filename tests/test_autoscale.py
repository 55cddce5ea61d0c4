"""The autoscaler's rule on recorded windows (grow, shrink, hold, bounds, cool-down, growth that
did not pay), the ``auto`` spec, and one real processes run that grows from one actor while its
learner waits."""

import json
import os
import re
import signal
import subprocess
import time

import pytest

from shoal.launch.experiments.distributed.autoscale import Autoscaler, Window, parse_auto
from shoal.launch.experiments.distributed.autoscale_loop import _window
from shoal.launch.experiments.distributed.settings import LaunchSettings
from tests.shoal_cli import run_shoal, start_shoal
from tests.waiting import csv_rows, wait_for


def window(wait=0.0, blocked=0.0, speed=1000.0, room=True):
    return Window(learner_wait=wait, actors_blocked=blocked, steps_per_s=speed, room=room)


STARVED, BLOCKED, BALANCED = window(wait=0.6), window(wait=0.1, blocked=0.7), window(wait=0.1, blocked=0.1)


def test_grows_while_the_learner_waits_and_the_machine_has_room():
    scaler = Autoscaler(low=1, high=4, count=1)
    decision = scaler.decide(STARVED, now=100.0)
    assert decision.target == 2 and "learner waits 60%" in decision.reason
    held = scaler.decide(window(wait=0.6, speed=1500, room=False), now=200.0)  # (the growth paid: +50%)
    assert held.target == 2 and "no room" in held.reason


def test_holds_in_the_cool_down_after_a_change():
    scaler = Autoscaler(low=1, high=4, count=1, cooldown_s=12.0)
    assert scaler.decide(STARVED, now=100.0).target == 2
    held = scaler.decide(window(wait=0.6, speed=5000), now=111.0)
    assert held.target == 2 and "cooling down" in held.reason
    assert scaler.decide(window(wait=0.6, speed=5000), now=113.0).target == 3  # paid off, still starved


def test_a_growth_that_does_not_raise_throughput_is_undone_and_not_tried_again_for_a_while():
    scaler = Autoscaler(low=1, high=4, count=2, cooldown_s=10.0, retry_s=100.0, min_gain=0.05)
    assert scaler.decide(window(wait=0.5, speed=1000), now=0.0).target == 3
    undone = scaler.decide(window(wait=0.5, speed=1040), now=20.0)  # +4% < 5%
    assert undone.target == 2 and "did not raise throughput" in undone.reason
    held = scaler.decide(window(wait=0.5, speed=1000), now=40.0)
    assert held.target == 2 and "did not pay" in held.reason
    assert scaler.decide(window(wait=0.5, speed=1000), now=121.0).target == 3  # after retry_s


def test_shrinks_while_actors_are_blocked_on_inserts_or_the_learner_is_saturated_never_below_min():
    scaler = Autoscaler(low=2, high=8, count=4, cooldown_s=0.0)
    decision = scaler.decide(BLOCKED, now=1.0)
    assert decision.target == 3 and "blocked on inserts 70%" in decision.reason
    saturated = scaler.decide(window(wait=0.0, blocked=0.3), now=2.0)
    assert saturated.target == 2 and "learner saturated" in saturated.reason
    assert scaler.decide(BLOCKED, now=3.0).target == 2  # MIN


def test_holds_at_max_and_when_balanced():
    scaler = Autoscaler(low=1, high=2, count=2)
    decision = scaler.decide(STARVED, now=100.0)
    assert decision.target == 2 and "most allowed (MAX)" in decision.reason
    balanced = scaler.decide(BALANCED, now=200.0)
    assert balanced.target == 2 and balanced.reason.startswith("balanced")
    assert Autoscaler(low=1, high=4, count=1).decide(window(wait=0.6, blocked=0.3), now=100.0).target == 1


def test_a_window_is_measured_from_two_readings_of_the_nodes_timings():
    def reading(at, wait, wall, steps, actors):
        return {
            "at": at,
            "learner": {"time_s": {"sample_wait": wait}, "wall_s": wall},
            "env_steps": steps,
            "actors": {label: {"time_s": {"replay_insert": ins}, "wall_s": w} for label, (ins, w) in actors.items()},
        }

    last = reading(10.0, 1.0, 10.0, 5_000, {"actor_0": (2.0, 10.0)})
    now = reading(13.0, 2.5, 13.0, 8_000, {"actor_0": (2.3, 13.0), "actor_1": (0.9, 1.0)})  # actor_1: new
    w = _window(last, now, True, "1.2 of 2 cores idle")
    assert w.learner_wait == pytest.approx(0.5) and w.actors_blocked == pytest.approx(0.1)
    assert w.steps_per_s == pytest.approx(1000.0) and "1.2 of 2 cores idle" in w.text()


def test_the_auto_spec_and_its_errors():
    assert parse_auto(4, cap=64, default_high=2) is None
    assert parse_auto("auto", cap=64, default_high=2) == (1, 2)
    assert parse_auto("auto:2-6", cap=64, default_high=2) == (2, 6)
    for bad in ("auto:0-3", "auto:4-2", "auto:1-65", "auto:x", "many"):
        with pytest.raises(ValueError, match="auto"):
            parse_auto(bad, cap=64, default_high=2)
    with pytest.raises(ValueError, match=r"--num-actors: auto:3-1"):
        LaunchSettings(num_actors="auto:3-1").check("--num-actors")
    settings = LaunchSettings(num_actors="auto:1-3")
    assert LaunchSettings.from_record(settings.record()).actor_bounds() == (1, 3)  # resume keeps the mode


def check_grows_from_one_actor(tmp_path, *launcher_args) -> dict:
    """Actors stepping an env that sleeps leave the learner waiting and the cores idle: the
    driver adds the second actor (and says why), and the result records the count over time.
    Returns the run's result."""
    run_dir = tmp_path / "run"
    proc = start_shoal(
        "train",
        "--agent",
        "ppo",
        "--env",
        "tests.user_envs:SlowCartPole-v0",
        *launcher_args,
        "--num-actors",
        "auto:1-2",
        "--max-env-steps",
        "1000000",
        "--eval-every",
        str(10**8),
        "--run-dir",
        str(run_dir),
        "--seed",
        "0",
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )
    lines = []
    try:
        deadline = time.monotonic() + 240
        for line in proc.stderr:  # (the event itself: the decision's log line)
            lines.append(line)
            if "shoal: autoscale: 1 -> 2 actors: learner waits for samples" in line:
                break
            assert time.monotonic() < deadline, "".join(lines[-30:])
        else:
            pytest.fail("the run ended without growing:\n" + "".join(lines[-30:]))
        status = run_shoal("status", str(run_dir), timeout=60)
        # (target 2 with the growth's reason; or, were the machine slow enough that the window
        # after it ended first, target 1 with the reason it went back)
        assert re.search(r"actors: auto:1-2, target (2: learner waits|1: actor 2 did not raise)", status.stdout), (
            status.stdout + status.stderr
        )
        # The driver may add the actor before the learner's first update (it waits from its
        # start): stop after that update, the first row of learner.csv.
        wait_for(
            lambda: csv_rows(run_dir / "learner.csv") or proc.poll() is not None, 180, "the learner's first update"
        )
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    result = json.loads([line for line in out.splitlines() if line.startswith("{")][-1])
    assert result["num_actors_mode"] == "auto:1-2"
    assert "actor_1" in err  # (the node table: the added actor was a node of the program)
    # (the growth first; on a loaded machine the driver may measure the window after it before
    # the stop and remove the actor again when throughput did not rise: a decision with its reason)
    counts = [c["actors"] for c in result["actor_counts"]]
    assert counts[:2] == [1, 2] and set(counts) <= {1, 2}, result["actor_counts"]
    assert "learner waits" in result["actor_counts"][1]["reason"]
    assert all(c["reason"] for c in result["actor_counts"][2:]), result["actor_counts"]
    # (the added actor's own breakdown may not have reached the driver before the stop)
    assert result["learner_steps"] > 0 and {"learner", "actor_0"} <= set(result["time_breakdown"])
    assert json.loads((run_dir / "config.json").read_text())["launch"]["num_actors"] == "auto:1-2"
    return result


@pytest.mark.e2e
@pytest.mark.slow  # the driver grows only while cores sit idle (CpuRoom), which a machine busy with other
# work may not give within the test's 240 s (CI's two workers did not, once in three rehearsals); the
# decisions themselves are tested above, on measured windows
def test_a_processes_run_grows_from_one_actor_while_its_learner_waits(tmp_path):
    result = check_grows_from_one_actor(tmp_path, "--launcher", "processes")
    assert "cores" in result["actor_counts"][1]["reason"]  # (the room it saw: idle cores)
