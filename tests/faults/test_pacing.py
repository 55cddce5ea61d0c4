"""Actors of a distributed run do not spend its budget while the learner has not started: they
are paced until its first update (``StepGrants``), and the progress line says what it waits for."""

import json

import pytest

from shoal.core.counting import Counter
from shoal.launch.experiments.distributed.step_grants import LEARNING, StepGrants
from tests.shoal_cli import run_shoal


def test_actors_take_only_their_head_start_until_the_learner_updates_then_the_rest_of_the_budget():
    counter, budget, n, head_start = Counter(), 100_000, 16, 512
    actors = [StepGrants(counter, f"actor_{i}", budget, n, head_start=head_start) for i in range(4)]
    for grants in actors:  # (each actor reports what it took; the learner has not updated)
        steps = 0
        while True:
            grants.report(steps, ask=True)
            if grants.left == 0:
                break
            steps = grants.left * n
            for _ in range(grants.left):
                grants.took()
    held_back = counter.get_counts()
    assert held_back["env_steps"] == 4 * head_start, held_back  # (512 is a multiple of 16: not one step more)
    for grants in actors:  # asking again changes nothing while the learner has not updated
        grants.report(0, ask=True)
        assert grants.left == 0
    counter.increment(**{LEARNING: 1, "learner_steps": 1})  # the learner's first update
    actors[0].report(0, ask=True)
    assert actors[0].left > 0  # no longer paced
    actors[0].report(0, release=True)


@pytest.mark.e2e
@pytest.mark.timeout(600)
def test_impala_actors_wait_for_the_learner_and_the_progress_line_says_so(tmp_path):
    """The README's IMPALA example, smaller: before the learner's first update (it compiles,
    then its dataset opens) the actors took at most their head starts, not the budget."""
    run_dir, budget, num_envs, num_actors = tmp_path / "run", 30_000, 16, 2
    proc = run_shoal(
        "train",
        "--agent",
        "impala",
        "--env",
        "CartPole-v1",
        "--launcher",
        "processes",
        "--num-actors",
        str(num_actors),
        "--num-envs",
        str(num_envs),
        "--max-env-steps",
        str(budget),
        "--target-return",
        "1e9",
        "--eval-episodes",
        "2",
        "--run-dir",
        str(run_dir),
        timeout=500,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((run_dir / "result.json").read_text())
    head_start = 2 * 16 * 16  # (twice IMPALA's env_steps_before_learning: rollout_length * sequences_per_update)
    assert result["first_update_env_steps"] <= num_actors * head_start, result
    assert result["learner_steps"] > 0 and result["env_steps"] >= budget
    waiting = [
        line
        for line in proc.stderr.splitlines()
        if line.startswith("[train]") and "waiting for the learner's first update: " in line
    ]
    assert waiting, proc.stderr[-3000:]
    assert all(
        int(line.split("env_steps ")[1].split(" ")[0].replace(",", "")) <= num_actors * head_start for line in waiting
    )
