"""One way to run an experiment: a run made from the Python API (one process, or a distributed
program) is continued by `shoal train --resume` as one made by the CLI, from the one run.json
that names everything it restores (learner, replay, counter, evaluator schedule, and each
actor's schedule position and RNG key)."""

import json
import re

import pytest

from shoal.agents import get_builder
from shoal.launch import ExperimentConfig, run_distributed_experiment, run_experiment
from tests.shoal_cli import run_shoal

pytestmark = pytest.mark.e2e  # real runs, resumed by `shoal train --resume`


def config(run_dir, max_env_steps, **changes):
    return ExperimentConfig.from_flat(
        builder=get_builder("dqn", min_replay_size=256),
        env_id="CartPole-v1",
        num_envs=8,
        seed=3,
        max_env_steps=max_env_steps,
        eval_every=1_000,
        eval_episodes=2,
        target_return=1e9,
        run_dir=str(run_dir),
        progress=False,
        **changes,
    )


def resume(run_dir, *args):
    proc = run_shoal("train", "--resume", str(run_dir), *args, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc


def test_a_one_process_run_made_from_python_resumes_from_the_cli(tmp_path):
    run_dir = tmp_path / "run"
    first = run_experiment(config(run_dir, 1_500))
    saved = json.loads((run_dir / "checkpoints" / "run.json").read_text())
    assert saved["env_steps"] == first["env_steps"] and set(saved["actors"]) == {"actor"}
    assert json.loads((run_dir / "config.json").read_text())["launch"] is None  # (the one-process runner)
    result, _ = resume(run_dir, "--max-env-steps", "3000", "--quiet")
    restored = result["resumed_from"]
    assert restored["learner_digest"] == saved["learner_digest"]
    assert restored["actor_env_steps"] == saved["actors"]["actor"]["env_steps"]
    assert restored["actor_key"] == saved["actors"]["actor"]["key"]
    assert restored["next_eval_at"] == saved["evaluator"]["next"]
    assert result["env_steps"] >= 3000 and "launcher" not in result


@pytest.mark.slow  # (CI time; faults/test_resume.py resumes a distributed run in CI: -m slow runs this too)
def test_a_distributed_run_made_from_python_resumes_from_the_cli(tmp_path):
    run_dir = tmp_path / "run"
    first = run_distributed_experiment(config(run_dir, 3_000), num_actors=2, launcher="inprocess")
    assert first["launcher"] == "inprocess" and first["learner_steps"] > 0
    saved = json.loads((run_dir / "checkpoints" / "run.json").read_text())
    launch = json.loads((run_dir / "config.json").read_text())["launch"]
    assert launch["launcher"] == "inprocess" and launch["num_actors"] == 2
    # one run.json names everything: the evaluator's schedule, each actor's schedule and key
    # (the evaluator's last evaluation is at the budget; actors may run on while the program stops)
    assert saved["evaluator"]["next"] > 3_000 and saved["evaluator"]["num_evals"] >= 2
    assert set(saved["actors"]) == {"actor_0", "actor_1"}
    assert all(a["env_steps"] > 0 and len(a["key"]) == 2 for a in saved["actors"].values())
    assert saved["counter"]["env_steps"] == saved["env_steps"]
    result, proc = resume(run_dir, "--max-env-steps", "6000")  # (with its progress line)
    restored = result["resumed_from"]
    assert result["launcher"] == "inprocess" and result["env_steps"] >= 6000
    assert restored["learner_digest"] == saved["learner_digest"]
    assert restored["actors"] == {label: a["env_steps"] for label, a in saved["actors"].items()}
    assert restored["next_eval_at"] == saved["evaluator"]["next"]
    for label, state in saved["actors"].items():  # each actor continued its schedule with its own RNG key
        assert (
            f"[{label}] resumes its schedules from its checkpoint at {state['env_steps']:,} env steps "
            f"(key {state['key']})" in proc.stdout + proc.stderr
        )
    # this run's speed, not the restored steps over a second (a resumed run once showed 856k steps/s)
    speeds = [
        float(m.group(1).replace(",", "")) for m in re.finditer(r"\[train\] .*steps_per_s ([0-9,.]+)", proc.stderr)
    ]
    assert speeds and speeds[0] < saved["env_steps"], proc.stderr[-2000:]
