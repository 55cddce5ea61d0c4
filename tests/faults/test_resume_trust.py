"""A resume imports and calls nothing that only its run directory names, refuses a directory its
group may write, and a run-directory check that cannot finish refuses (issue 36, items 1 and 2)."""

import json
import os
import shutil
import sys

import pytest

from shoal.core import files
from shoal.launch import resume_experiment
from shoal.launch.experiments.run_directory.claim import load_run
from shoal.launch.experiments.run_directory.config_record import flat_record, grouped_record
from shoal.launch.experiments.run_directory.directory import RunDirectory
from tests.faults.harness import shoal_main


@pytest.fixture(scope="module")
def finished(finished_dqn_run):
    """A real one-process run that ended with a checkpoint (made from Python, once per session:
    tests/conftest.py; each test copies it)."""
    return finished_dqn_run


def _copy(finished, tmp_path, **config):
    """A copy of the finished run, its ``config.json`` updated with ``config``."""
    run_dir = tmp_path / "run"
    shutil.copytree(finished, run_dir, symlinks=True)
    path = run_dir / "config.json"
    saved = flat_record(json.loads(path.read_text()))  # (edited by flat name, written back as the run wrote it)
    path.write_text(json.dumps(grouped_record({**saved, **config})))
    return run_dir


def _files(run_dir):
    """Every entry under ``run_dir`` with its mode, size and modification time."""
    return {
        (
            root,
            name,
            os.lstat(os.path.join(root, name)).st_mode,
            os.lstat(os.path.join(root, name)).st_size,
            os.lstat(os.path.join(root, name)).st_mtime_ns,
        )
        for root, dirs, names in os.walk(run_dir)
        for name in dirs + names
    }


PLANTED = "tests.faults.planted"


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "config, flag",
    [
        ({"env_factory": "os:system", "env_args": {"command": "touch {mark}"}}, "--env-factory os:system"),
        ({"env_id": f"{PLANTED}:CartPole-v1"}, f"--env {PLANTED}:CartPole-v1"),
        ({"agent": f"{PLANTED}:Builder"}, f"--agent {PLANTED}:Builder"),
    ],
    ids=["env_factory", "env-module", "agent-plugin"],
)
def test_resume_imports_and_calls_nothing_only_config_json_names(finished, tmp_path, config, flag):
    mark = tmp_path / "PWNED"
    config = json.loads(json.dumps(config).replace("{mark}", str(mark)))
    run_dir = _copy(finished, tmp_path, **config)
    before = _files(run_dir)
    rc, errors, text = shoal_main("train", "--resume", str(run_dir), "--quiet")
    assert rc == 2 and len(errors) == 1, text
    key = next(iter(config)) if "env_factory" not in config else "env_factory"
    assert errors[0].startswith(f"shoal: error: {run_dir / 'config.json'} names {key} "), errors
    assert f"name it again ({flag}) or pass --trust-run-dir" in errors[0], errors
    assert not mark.exists() and PLANTED not in sys.modules
    assert _files(run_dir) == before and "Traceback" not in text
    # the Python API refuses it the same way
    with pytest.raises(ValueError, match="a resume runs nothing only its run directory names"):
        resume_experiment(str(run_dir))
    assert not mark.exists() and PLANTED not in sys.modules and _files(run_dir) == before


@pytest.mark.e2e  # (a resumed run trained on to 480 env steps)
@pytest.mark.timeout(300)
def test_a_factory_named_again_or_a_trusted_directory_is_used(finished, tmp_path):
    factory = "tests.user_envs:short_cartpole"
    run_dir = _copy(finished, tmp_path, env_factory=factory, env_args={"max_steps": 30})
    before = _files(run_dir)
    rc, errors, text = shoal_main(
        "train", "--resume", str(run_dir), "--env-factory", "tests.user_envs:other", "--quiet"
    )
    assert rc == 2 and errors == [
        f"shoal: error: --env-factory 'tests.user_envs:other' is not the run's "
        f"({run_dir / 'config.json'} has env_factory '{factory}'): a resumed run keeps "
        "its own; give its value, or drop --env-factory"
    ], text
    rc, errors, text = shoal_main("train", "--resume", str(run_dir), "--agent", "ppo", "--quiet")
    assert rc == 2 and "--agent 'ppo' is not the run's" in errors[0], text
    assert _files(run_dir) == before
    # given again (or trusted): the config is the run's, its factory as the run recorded it
    assert load_run(str(run_dir), env_factory=factory)[0].env.factory == factory
    assert load_run(str(run_dir), trust_run_dir=True)[0].env.factory == factory
    from tests.user_envs import short_cartpole  # (named by the function itself, from Python)

    assert (
        load_run(str(run_dir), env_factory=short_cartpole, agent="dqn", env_id="CartPole-v1")[0].env.factory == factory
    )
    rc, errors, text = shoal_main(
        "train",
        "--resume",
        str(run_dir),
        "--env-factory",
        factory,
        "--agent",
        "dqn",
        "--max-env-steps",
        "480",
        "--quiet",
    )
    assert rc == 0 and not errors, text
    assert json.loads((run_dir / "result.json").read_text())["env_steps"] >= 480


def test_what_needs_naming_again():
    """Built-in agents and registered ids need nothing; a Ray address is named again like code."""
    from shoal.launch.experiments.run_directory.claim import check_named_code

    path = "R/config.json"
    plain = {"agent": "dqn", "env_id": "ALE/Pong-v5", "env_factory": None, "launch": None}
    check_named_code(path, plain, {}, trust_run_dir=False)
    ray = {**plain, "launch": {"launcher": "ray", "ray_address": "10.0.0.1:6379"}}
    with pytest.raises(
        ValueError,
        match=r"names ray_address '10.0.0.1:6379', a Ray cluster, which a resume would "
        r"join; .* \(--ray-address 10.0.0.1:6379\)",
    ):
        check_named_code(path, ray, {}, trust_run_dir=False)
    check_named_code(path, ray, {"ray_address": "10.0.0.1:6379"}, trust_run_dir=False)
    check_named_code(path, ray, {}, trust_run_dir=True)
    with pytest.raises(ValueError, match="--ray-address 'auto' is not the run's"):
        check_named_code(path, ray, {"ray_address": "auto"}, trust_run_dir=True)


@pytest.mark.timeout(300)
def test_resume_refuses_a_directory_others_may_write(finished, tmp_path):
    run_dir = _copy(finished, tmp_path)
    for path, mode, says in (
        (run_dir, 0o775, f"run directory {str(run_dir)!r} may be written by its group (mode 775)"),
        (run_dir / "config.json", 0o664, f"{run_dir / 'config.json'} may be written by its group (mode 664)"),
        (run_dir / "checkpoints", 0o757, f"{run_dir / 'checkpoints'} may be written by anyone (mode 757)"),
    ):
        original = path.stat().st_mode
        path.chmod(mode)
        before = _files(run_dir)
        rc, errors, text = shoal_main("train", "--resume", str(run_dir), "--quiet")
        assert rc == 2 and len(errors) == 1 and says in errors[0], text
        assert _files(run_dir) == before
        with pytest.raises(ValueError, match="may be written by"):
            resume_experiment(str(run_dir))
        path.chmod(original)
    if os.geteuid() != 0:
        return  # (only root can give a file to another user)
    os.chown(run_dir / "checkpoints" / "run.json", 65534, 65534)
    rc, errors, text = shoal_main("train", "--resume", str(run_dir), "--quiet")
    assert rc == 2 and len(errors) == 1 and "run.json belongs to" in errors[0] and "not to you" in errors[0], text


def test_a_run_directory_check_that_cannot_finish_refuses(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    for i in range(50):
        (run_dir / f"f{i:02d}").touch()
    files.check_run_directory(str(run_dir), max_entries=50)  # (every entry checked: passes)
    (run_dir / "one-more").touch()
    with pytest.raises(ValueError, match=f"^run directory {str(run_dir)!r} holds more than 50 entries"):
        files.check_run_directory(str(run_dir), max_entries=50)


@pytest.mark.timeout(300)
def test_resume_of_a_directory_too_large_to_check_is_refused_not_followed(finished, tmp_path, monkeypatch):
    """The issue's case at a smaller limit: entries past the limit, and a ``checkpoints/learner``
    link to another directory that a check stopping early would let the resume write through."""
    monkeypatch.setattr(files, "MAX_ENTRIES", 50, raising=False)
    run_dir = _copy(finished, tmp_path)
    elsewhere = tmp_path / "elsewhere"
    (run_dir / "checkpoints" / "learner").rename(elsewhere)
    (run_dir / "checkpoints" / "learner").symlink_to(elsewhere)
    for i in range(60):
        (run_dir / f"f{i:02d}").touch()
    before, outside = _files(run_dir), _files(elsewhere)
    rc, errors, text = shoal_main("train", "--resume", str(run_dir), "--max-env-steps", "800", "--quiet")
    assert rc == 2 and len(errors) == 1, text
    assert f"run directory {str(run_dir)!r} holds more than 50 entries" in errors[0], text
    assert _files(run_dir) == before and _files(elsewhere) == outside
    with pytest.raises(ValueError, match="holds more than 50 entries"):
        RunDirectory(str(run_dir)).lock()
    assert _files(run_dir) == before
