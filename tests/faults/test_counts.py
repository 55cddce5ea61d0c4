"""One source for each count of a distributed run (issue 36, item 13): the result's env and
learner steps are ``run.json``'s (after a double Ctrl-C too, and never fewer after a resume),
its ``actor_counts`` are ``program.csv``'s rows (``shoal scale`` changes included), and a
resumed run's ``train_s`` and ``eval_s`` are of its own launch."""

import json
import signal
import threading

import jax
import pytest

from shoal.agents import get_builder
from shoal.launch import ExperimentConfig
from shoal.launch.experiments.evaluation import Evaluator
from tests.faults.harness import running, shoal_main, start
from tests.shoal_cli import run_shoal
from tests.waiting import csv_rows, wait_for


def _run_json(run_dir):
    return json.loads((run_dir / "checkpoints" / "run.json").read_text())


def test_a_resumed_evaluators_eval_s_is_its_launchs_and_train_s_never_negative():
    config = ExperimentConfig.from_flat(
        builder=get_builder("dqn"), env_id="CartPole-v1", num_envs=2, eval_episodes=1, progress=False
    )
    learner = config.builder.make_learner(
        jax.random.PRNGKey(0), config.make_networks(config.environment_spec()), iter([])
    )
    evaluator = Evaluator(config, learner, jax.random.PRNGKey(1), 0.0)
    evaluator.restore({"next": 6000, "num_evals": 2, "last_return": 21.5, "last_at": 4000, "eval_s": 8.557})
    result = evaluator.result(6000, 100, wall_s=8.388)  # (the figures: train_s was -0.169)
    assert (result["eval_s"], result["train_s"], result["num_evals"]) == (0.0, 8.388, 2)
    assert evaluator.save()["eval_s"] == 8.557  # (the checkpoint keeps the run's total)
    evaluator.close()


@pytest.mark.e2e
@pytest.mark.timeout(600)
def test_the_result_run_json_and_program_csv_agree_after_scale_a_double_ctrl_c_and_a_resume(tmp_path):
    run_dir = tmp_path / "run"
    proc = start(run_dir, "--max-env-steps", str(10**7), "--checkpoint-every", "1", num_actors=1, default_sigint=True)
    lines = []
    try:
        wait_for(lambda: running(run_dir, "counter", "learner", "actor_0", "evaluator"), 300, "every node to serve")
        wait_for(
            lambda: (
                (run_dir / "checkpoints" / "run.json").exists()
                and _run_json(run_dir)["counter"].get("learner_steps", 0) > 0
            ),
            120,
            "a checkpoint after learning",
        )
        rc, errors, text = shoal_main("scale", str(run_dir), "--actors", "2")
        assert rc == 0, text
        wait_for(
            lambda: [r["actors"] for r in csv_rows(run_dir / "program.csv")] == ["1", "2"],
            120,
            "program.csv's row of the second actor",
        )
        reader = threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True)
        reader.start()
        proc.send_signal(signal.SIGINT)
        wait_for(lambda: any(line.startswith("shoal: stopping") for line in lines), 60, "the first Ctrl-C to be taken")
        proc.send_signal(signal.SIGINT)
        out = proc.stdout.read()
        proc.wait(timeout=120)
        reader.join(30)
    finally:
        proc.kill()
    assert proc.returncode == 130, "".join(lines)[-3000:]
    result = json.loads(out.strip().splitlines()[-1])
    saved = _run_json(run_dir)
    assert (result["env_steps"], result["learner_steps"]) == (saved["env_steps"], saved["counter"]["learner_steps"])
    assert result["learner_steps"] > 0
    rows = csv_rows(run_dir / "program.csv")
    assert [(c["actors"], c["env_steps"]) for c in result["actor_counts"]] == [
        (int(r["actors"]), int(r["env_steps"])) for r in rows
    ]
    assert [c["reason"] for c in result["actor_counts"]] == ["start", "shoal scale"]

    budget = saved["env_steps"] + 2000  # (the resumed run ends by its budget)
    resumed = run_shoal("train", "--resume", str(run_dir), "--max-env-steps", str(budget), "--quiet", timeout=500)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    again = json.loads(resumed.stdout.strip().splitlines()[-1])
    saved = _run_json(run_dir)
    assert (again["env_steps"], again["learner_steps"]) == (saved["env_steps"], saved["counter"]["learner_steps"])
    assert again["learner_steps"] >= result["learner_steps"] and again["env_steps"] >= budget
    assert 0 <= again["eval_s"] <= again["wall_s"] and again["train_s"] >= 0, again


def test_the_replay_checkpoint_run_json_names_survives_reverb_removing_it(tmp_path):
    """Reverb removes its older checkpoint when it writes a new one: a run killed between that
    and the commit of the new one (a double Ctrl-C) left run.json naming a checkpoint that was
    gone (a resume refused it). The committed one is hard-linked aside first and put back."""
    from shoal.launch.experiments.run_directory.checkpoints import commit
    from shoal.launch.experiments.run_directory.replay_checkpoints import (
        KEPT,
        keep_committed_replay,
        recover_committed_replay,
    )

    checkpoints = tmp_path / "checkpoints"
    old = checkpoints / "replay" / "A"
    old.mkdir(parents=True)
    (old / "items.tfrecord").write_bytes(b"items of A")
    (old / "DONE").write_bytes(b"")
    (checkpoints / "run.json").write_text(json.dumps({"replay_checkpoint": "A"}))
    keep_committed_replay(str(checkpoints))
    assert (checkpoints / KEPT / "A" / "items.tfrecord").stat().st_ino == (old / "items.tfrecord").stat().st_ino
    import shutil

    shutil.rmtree(old)  # (what Reverb does as it writes B)
    (checkpoints / "replay" / "B").mkdir()
    (checkpoints / "replay" / "B" / "DONE").write_bytes(b"")  # (complete: the older one may go once B is committed)
    recover_committed_replay(str(checkpoints), "A")  # (the resume, run.json still naming A)
    assert (old / "items.tfrecord").read_bytes() == b"items of A" and not (checkpoints / KEPT / "A").exists()
    keep_committed_replay(str(checkpoints))
    commit(str(tmp_path), {"replay_checkpoint": "B"}, 10)  # (B committed: A and its links go)
    assert sorted(p.name for p in (checkpoints / "replay").iterdir()) == ["B"] and not (checkpoints / KEPT).exists()
    (checkpoints / KEPT / "x").mkdir(parents=True)
    recover_committed_replay(str(checkpoints), "../" + KEPT + "/x")  # (a name with a path is no checkpoint's)
    assert (checkpoints / KEPT / "x").is_dir()
