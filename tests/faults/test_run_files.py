"""A run directory's state files, checkpoint and env id refused in one line before anything is
written, and the step budget a distributed run keeps (issue 21, items 8, 11 and 12)."""

import json
import os
import random
import shutil

import pytest

from shoal.core.counting import Counter
from shoal.launch.experiments.cli.main import main
from shoal.launch.experiments.run_directory.config_record import flat_record
from tests.faults.harness import SMALL, errors, start
from tests.shoal_cli import run_shoal

BUDGET_ARGS = ["--max-env-steps", "300", "--set", "min_replay_size=100"]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """A small single-process run that ended with a checkpoint (copied by each test)."""
    run_dir = tmp_path_factory.mktemp("finished") / "run"
    done = run_shoal("train", *SMALL, *BUDGET_ARGS, "--run-dir", str(run_dir), timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    return run_dir


def _copy(finished_run, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(finished_run, run_dir)
    shutil.rmtree(run_dir / "tb")
    os.remove(run_dir / "result.json")
    return run_dir


def _files(run_dir):
    """Every file under ``run_dir`` (but the lock) with its size and modification time."""
    return {
        (path, os.stat(os.path.join(path, name)).st_size, os.stat(os.path.join(path, name)).st_mtime_ns, name)
        for path, _, names in os.walk(run_dir)
        for name in names
        if name != ".lock"
    }


def _resume(run_dir, capsys):
    code = main(["train", "--resume", str(run_dir), "--quiet"])
    return code, errors(capsys.readouterr().err)


def _edit(path, change):
    value = json.loads(path.read_text())
    if path.name == "config.json":  # (as a run of schema version 1 wrote it: the fields by flat name)
        value = flat_record(value)
    change(value)
    path.write_text(json.dumps(value))


CASES = [  # (file, edit, the field and what the line says)
    ("config.json", lambda c: c.update(agent_config=[]), "agent_config must be an object, got []"),
    ("config.json", lambda c: c.update(seed="0"), 'seed must be an integer, got "0"'),
    (
        "config.json",
        lambda c: c["agent_config"].update(learning_rate=[1]),
        "agent_config.learning_rate must be a finite number, got [1]",
    ),
    (
        "config.json",
        lambda c: c.update(launch={"num_actors": "2"}),
        'launch.num_actors must be an integer, "auto" or "auto:MIN-MAX", got "2"',
    ),
    ("checkpoints/run.json", lambda r: r.update(counter=[1]), "counter must be an object, got [1]"),
    ("checkpoints/run.json", lambda r: r.update(env_steps="x"), 'env_steps must be an integer, got "x"'),
    ("checkpoints/run.json", lambda r: r.update(spec=None), "spec must be an object, got null"),
    (
        "checkpoints/run.json",
        lambda r: r["counter"].update(env_steps=-5),
        "counter.env_steps must be an integer in [0, 2**53), got -5",
    ),
    (
        "checkpoints/run.json",
        lambda r: r["actors"]["actor"].update(key="k"),
        'actors.actor.key must be a list of integers, got "k"',
    ),
    (
        "checkpoints/run.json",
        lambda r: r.update(replay_checkpoint=".."),
        'replay_checkpoint must be the name of a directory in checkpoints/replay, got ".."',
    ),
]


@pytest.mark.e2e
@pytest.mark.timeout(300)
@pytest.mark.parametrize("name,change,says", CASES, ids=[f"{c[0]}:{c[2].split()[0]}" for c in CASES])
def test_a_state_file_of_the_wrong_shape_is_refused_in_one_line_before_anything_is_written(
    finished_run, tmp_path, capsys, name, change, says
):
    run_dir = _copy(finished_run, tmp_path)
    _edit(run_dir / name, change)
    before = _files(run_dir)
    code, lines = _resume(run_dir, capsys)
    assert (code, lines) == (2, [f"shoal: error: {run_dir / name}: {says}"])
    assert _files(run_dir) == before and not (run_dir / "tb").exists()


@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_a_garbage_learner_checkpoint_is_refused_in_one_line_naming_it_before_anything_is_written(
    finished_run, tmp_path, capsys
):
    run_dir = _copy(finished_run, tmp_path)
    learner = run_dir / "checkpoints" / "learner"
    garbage = random.Random(0)
    for path, _, names in os.walk(learner):
        for name in names:
            if "ocdbt.process_0" in path:  # the arrays' data files
                with open(os.path.join(path, name), "wb") as f:
                    f.write(garbage.randbytes(300))
    before = _files(run_dir)
    code, lines = _resume(run_dir, capsys)
    assert code == 2 and len(lines) == 1 and len(lines[0]) < 400, lines
    assert lines[0].startswith(f"shoal: error: {learner}") and "the learner checkpoint cannot be read" in lines[0]
    assert _files(run_dir) == before and not (run_dir / "tb").exists()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("env_id", [":CartPole-v1", "CartPole-v1:", ".envs:CartPole-v1"])
def test_an_env_id_of_neither_form_is_refused_in_one_line_naming_the_forms(tmp_path, capsys, env_id):
    code = main(["train", "--env", env_id, "--run-dir", str(tmp_path / "run"), "--quiet"])
    assert (code, errors(capsys.readouterr().err)) == (
        2,
        [
            f"shoal: error: environment id {env_id!r} is neither EnvId nor module:EnvId (e.g. CartPole-v1, or "
            "my_package.envs:MyEnv-v0 to import my_package.envs, which registers MyEnv-v0)"
        ],
    )
    assert not (tmp_path / "run").exists()


def test_step_grants_keep_any_interleaving_of_actors_within_one_vector_step_of_the_budget():
    """Three actors step, report, stop and crash in a seeded random order against one counter:
    the counted steps end at the budget or at most num_envs - 1 past it, and nobody steps after."""
    from shoal.launch.experiments.distributed.step_grants import StepGrants

    for seed in range(20):
        rng, counter, budget, n = random.Random(seed), Counter(), 1001 + 37 * seed, 8
        actors = {
            f"actor_{i}": [StepGrants(counter, f"actor_{i}", budget, n), 0] for i in range(3)
        }  # [grants, unreported]
        for _ in range(5000):
            label = rng.choice(sorted(actors))
            grants, unreported = actors[label]
            roll = rng.random()
            if roll < 0.01:  # crashed: its unreported steps are lost; it restarts
                actors[label] = [StepGrants(counter, label, budget, n, restarted=True), 0]
            elif roll < 0.02 and len(actors) > 1:  # scaled down: reports, hands its grant back
                grants.report(unreported, release=True)
                del actors[label]
            elif roll < 0.1:  # the periodic report
                grants.report(unreported)
                actors[label][1] = 0
            elif grants.left == 0:
                grants.report(unreported, ask=True)
                actors[label][1] = 0
            else:
                grants.took()
                actors[label][1] += n
        for grants, unreported in actors.values():  # every actor's last report
            grants.report(unreported, ask=True)
            assert grants.left == 0, seed
        env_steps = counter.get_counts()["env_steps"]
        assert budget <= env_steps <= budget + n - 1, (seed, env_steps)


@pytest.mark.e2e
@pytest.mark.timeout(600)
@pytest.mark.parametrize("num_actors", [1, 2])
def test_a_distributed_run_stops_within_one_vector_step_per_actor_and_both_files_say_so(tmp_path, num_actors):
    run_dir, budget, num_envs = tmp_path / "run", 1001, 8  # (SMALL's --num-envs)
    proc = start(run_dir, "--max-env-steps", str(budget), "--eval-every", str(10**6), num_actors=num_actors)
    try:
        out, err = proc.communicate(timeout=500)
    finally:
        proc.kill()
    assert proc.returncode == 0, err[-3000:]
    result = json.loads((run_dir / "result.json").read_text())
    saved = json.loads((run_dir / "checkpoints" / "run.json").read_text())
    assert json.loads(out.strip().splitlines()[-1])["env_steps"] == result["env_steps"]
    assert result["env_steps"] == saved["env_steps"] == saved["counter"]["env_steps"]
    assert budget <= result["env_steps"] <= budget + num_envs * num_actors
    assert sum(actor["env_steps"] for actor in saved["actors"].values()) == result["env_steps"]  # nothing unreported
