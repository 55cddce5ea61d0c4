"""``shoal tune``: real tiny tunes on CartPole (pruning, SIGTERM and ``--resume``, the best
trial's preset trained by ``shoal train --preset FILE``), and the bad inputs refused in one line
before anything starts."""

import contextlib
import dataclasses
import json
import os
import signal
import sqlite3
import subprocess

import pytest

optuna = pytest.importorskip("optuna", reason="shoal tune needs the tune extra (pip install -e '.[tune]')")

from shoal.agents import config_class  # noqa: E402
from shoal.agents.registry import builder_class, builtin_agents  # noqa: E402
from shoal.launch.experiments.cli.main import main  # noqa: E402
from shoal.launch.experiments.tune import study as studies  # noqa: E402
from shoal.launch.experiments.tune.spaces import DEFAULT_SPACES, check_space  # noqa: E402
from tests.shoal_cli import run_shoal, start_shoal  # noqa: E402
from tests.waiting import csv_rows, wait_for  # noqa: E402

# Each trial: a few thousand CartPole steps in one process (seconds)
TINY = ["--env", "CartPole-v1", "--max-env-steps", "3000", "--eval-every", "500", "--eval-episodes", "3"]
TINY += ["--num-envs", "4", "--startup-trials", "1"]


def _states(tune_dir) -> dict[int, str]:
    """``{trial number: state}`` read off the study file with SQLite ({} before it exists)."""
    try:
        with contextlib.closing(sqlite3.connect(f"file:{tune_dir}/study.db?mode=ro", uri=True)) as db:
            return dict(db.execute("SELECT number, state FROM trials"))
    except sqlite3.Error:
        return {}


def _sigterm_mid_trial_1(tune: subprocess.Popen, out) -> tuple[str, str]:
    """Sends ``tune`` SIGTERM once its trial 0 finished and trial 1 evaluated once (mid-run);
    returns its (stdout, stderr)."""
    try:
        mid_run = lambda: _states(out).get(0) == "COMPLETE" and csv_rows(out / "trials/1/s0/eval.csv")  # noqa: E731
        wait_for(lambda: mid_run() or tune.poll() is not None, 600, "trial 1's first evaluation")
        ended_early = tune.poll() is not None
        tune.send_signal(signal.SIGTERM)
        stdout, stderr = tune.communicate(timeout=300)
        assert not ended_early, f"the tune ended before trial 1 ran (states {_states(out)}): {stderr}"
    finally:
        if tune.poll() is None:
            tune.kill()
    return stdout, stderr


def _space(path, text: str) -> str:
    path.write_text(text)
    return str(path)


def test_every_agent_has_a_default_space_its_config_takes():
    for agent in builtin_agents():
        # (bc and cql train on a dataset, which shoal tune does not take: no default space)
        if getattr(builder_class(agent), "offline", False):
            continue
        space = check_space(agent, config_class(agent), DEFAULT_SPACES[agent], where=f"{agent}'s default space")
        assert len(space.params) >= 4, agent


@pytest.mark.parametrize(
    "space, message",
    [
        ("space: {learning_rat: {low: 0.001, high: 0.01}}", "'learning_rat' is not a setting of dqn; its settings:"),
        ("space: {learning_rate: {low: 0.01, high: 0.001}}", "learning_rate: the range [0.01, 0.001] is empty"),
        ("space: {n_step: {low: 1.5, high: 5}}", "n_step: an int setting's range takes an integer, got 1.5"),
        ("space: {prioritized_replay: {low: 0, high: 1}}", "prioritized_replay: a bool setting takes choices"),
        (
            "space: {learning_rate: {choices: [0.001, fast]}}",
            "learning_rate: a float setting's choice must be a number",
        ),
        ("space: {learning_rate: {low: 0.001, high: 2.0}}", "leaves the setting's accepted range (0, 1]"),
        (
            "space: {optimizer: {choices: [adam, sgd]}}",
            "optimizer='sgd' is refused: optimizer must be one of adam, rmsprop, got 'sgd'",
        ),
    ],
)
def test_a_bad_space_is_one_line_and_nothing_starts(tmp_path, capsys, space, message):
    out = tmp_path / "tune"
    code = main(
        [
            "tune",
            "--agent",
            "dqn",
            "--trials",
            "3",
            "--space",
            _space(tmp_path / "s.yaml", space),
            "--out",
            str(out),
            *TINY,
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and err.startswith("shoal: error: --space "), err
    assert message in err, err
    assert not out.exists()


def test_jobs_above_the_cores_is_one_line(tmp_path, capsys):
    out = tmp_path / "tune"
    code = main(
        ["tune", "--agent", "dqn", "--trials", "3", "--jobs", str((os.cpu_count() or 1) + 1), "--out", str(out), *TINY]
    )
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and f"--jobs must be in [1, {os.cpu_count()}]" in err, err
    assert not out.exists()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--ray-address", "127.0.0.1:6379"], "--ray-address 127.0.0.1:6379 needs --launcher ray"),
        (["--launcher", "ray", "--jobs", str(os.cpu_count() + 1)], f"--jobs must be in [1, {os.cpu_count()}] on this"),
    ],
)
def test_a_bad_ray_flag_is_one_line_before_ray_starts(tmp_path, capsys, argv, message):
    out = tmp_path / "tune"
    assert main(["tune", "--agent", "dqn", "--trials", "3", "--out", str(out), *TINY, *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err
    assert not out.exists()


def test_a_study_of_another_agent_is_one_line(tmp_path, capsys):
    other = tmp_path / "ppo-tune"
    space = check_space("ppo", config_class("ppo"), {"learning_rate": {"low": 1e-4, "high": 1e-2}})
    studies.create(str(other), studies.TuneSettings("ppo", "CartPole-v1", 3, space))
    for argv, message in [
        (
            ["--agent", "dqn", "--trials", "3", "--out", str(other), *TINY],
            f"{other}/study.db is a study of ppo, not dqn",
        ),
        (["--resume", str(other), "--agent", "dqn"], f"--resume {other}: its study tunes ppo, not --agent dqn"),
    ]:
        assert main(["tune", *argv]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err, err
    # a ppo study file copied into a dqn tune's directory
    mixed = tmp_path / "mixed"
    dqn_space = check_space("dqn", config_class("dqn"), {"learning_rate": {"low": 1e-4, "high": 1e-2}})
    studies.create(str(mixed), studies.TuneSettings("dqn", "CartPole-v1", 3, dqn_space))
    os.replace(other / "study.db", mixed / "study.db")
    assert main(["tune", "--resume", str(mixed)]) == 2
    err = capsys.readouterr().err
    assert "is a study of ppo, but tune.json tunes dqn" in err and err.count("\n") == 1, err
    assert _states(mixed) == {} and not (mixed / "trials").exists()  # (nothing started)


@pytest.mark.e2e  # (real training: 3 trials, then shoal train from the preset)
def test_a_tiny_tune_prunes_the_hopeless_trial_and_writes_a_preset_that_trains(tmp_path, capsys):
    # trial 0 the default learning rate, trial 1 one that cannot learn (1e-9), trial 2 sampled
    space = "space:\n  learning_rate: {low: 1.0e-9, high: 1.0e-2, log: true}\n"
    space += "first_trials:\n  - {learning_rate: 0.004}\n  - {learning_rate: 1.0e-9}\n"
    out = tmp_path / "tune"
    done = run_shoal(
        "tune", "--agent", "dqn", "--trials", "3", "--space", _space(tmp_path / "s.yaml", space), "--out", str(out),
        *TINY, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    states = _states(out)
    assert states[0] == "COMPLETE" and states[1] == "PRUNED" and len(states) == 3, (states, done.stderr)
    assert "trial 1 pruned (learning_rate=1e-09)" in done.stderr
    for name in ("trials.csv", "summary.md", "best_preset.json", "tune.json"):
        assert (out / name).is_file(), name
    assert (out / "trials/0/s0/checkpoints/learner").is_dir()  # (evaluate, export: the trial's policy)
    assert not (out / "trials/0/s0/checkpoints/replay").exists()  # (no trial resumes: replay's goes)
    preset = json.loads((out / "best_preset.json").read_text())
    assert preset["agent"] == "dqn" and preset["base_preset"] == "dqn/classic"
    assert summary["best_settings"].items() <= preset["settings"].items()
    assert preset["experiment"]["max_env_steps"] == 3000
    capsys.readouterr()
    assert main(["status", str(out)]) == 0  # (in this process: the CLI's code, without a start)
    status = capsys.readouterr().out
    assert "pruned" in status and "best: trial" in status, status
    run_dir = tmp_path / "trained"
    assert main([
        "train", "--agent", "dqn", "--env", "CartPole-v1", "--preset", str(out / "best_preset.json"),
        "--max-env-steps", "1500", "--run-dir", str(run_dir), "--quiet",
    ]) == 0  # fmt: skip
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["env_steps"] == 1500
    config = json.loads((run_dir / "config.json").read_text())
    assert config["preset"] == "dqn/file:best_preset.json"
    assert config["agent_config"]["learning_rate"] == preset["settings"]["learning_rate"]


@pytest.mark.e2e  # (real training in a shoal tune process, stopped and resumed)
def test_sigterm_keeps_the_finished_trial_and_resume_goes_on(tmp_path, capsys):
    space = (
        "space:\n  learning_rate: {low: 1.0e-4, high: 1.0e-2, log: true}\nfirst_trials:\n  - {learning_rate: 0.004}\n"
    )
    out = tmp_path / "tune"
    argv = ["--agent", "dqn", "--trials", "3", "--space", _space(tmp_path / "s.yaml", space), "--no-prune"]
    tune = start_shoal(
        "tune", *argv, "--out", str(out), *TINY, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    stdout, stderr = _sigterm_mid_trial_1(tune, out)
    assert tune.returncode == 143, stderr
    assert json.loads(stdout.strip().splitlines()[-1])["terminated"] == "SIGTERM"
    assert _states(out) == {0: "COMPLETE", 1: "FAIL"}, stderr  # (the running trial: interrupted)
    first = studies.load(str(out)).trials[0].value
    resumed = run_shoal("tune", "--resume", str(out), "--trials", "2", timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    study = studies.load(str(out))
    assert [t.state.name for t in study.trials] == ["COMPLETE", "FAIL", "COMPLETE"]
    assert study.trials[0].value == first  # (kept, not run again)
    assert study.trials[2].params != study.trials[1].params  # (the resumed sampler draws afresh)
    capsys.readouterr()
    assert main(["status", str(out)]) == 0
    status = capsys.readouterr().out
    assert "interrupted" in status and "2 trials (2 complete, 1 interrupted)" in status, status


def test_a_resume_imports_a_plugin_agent_only_when_named_again(tmp_path, capsys):
    tune_dir = tmp_path / "plugin-tune"
    tune_dir.mkdir()
    record = {"agent": "my_agents:Builder", "env_id": "CartPole-v1", "trials": 3, "space": {"learning_rate": {}}}
    (tune_dir / "tune.json").write_text(json.dumps(record))
    assert main(["tune", "--resume", str(tune_dir)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "names the plug-in agent my_agents:Builder: name it again" in err, err


@pytest.mark.e2e  # (real training, in this process)
def test_run_tune_from_python(tmp_path):
    from shoal.launch.experiments.tune import run_tune

    with pytest.raises(ValueError, match="seed: each trial sets it itself"):
        run_tune("dqn", "CartPole-v1", 1, seed=3)
    space = {"learning_rate": {"low": 1e-3, "high": 1e-2, "log": True}, "n_step": {"choices": [1, 3]}}
    summary = run_tune(
        "dqn", "CartPole-v1", 1, space=space, out=str(tmp_path / "tune"), max_env_steps=1500, eval_every=500,
        eval_episodes=2, num_envs=4,
    )  # fmt: skip
    assert summary["trials"] == {"complete": 1} and set(summary["best_settings"]) == {"learning_rate", "n_step"}
    assert _states(tmp_path / "tune") == {0: "COMPLETE"}


@pytest.mark.e2e  # (real training: two trials of the compiled loop, in this process)
def test_a_jax_env_tunes_in_the_compiled_loop(tmp_path, capsys):
    pytest.importorskip("gymnax", reason="gymnax:<Id> needs the gymnax extra")
    space = (
        "space:\n  learning_rate: {low: 1.0e-4, high: 1.0e-2, log: true}\nfirst_trials:\n  - {learning_rate: 0.003}\n"
    )
    out = tmp_path / "tune"
    argv = ["tune", "--agent", "ppo", "--env", "gymnax:CartPole-v1", "--trials", "2", "--no-prune"]
    argv += ["--space", _space(tmp_path / "s.yaml", space), "--out", str(out), "--max-env-steps", "4096"]
    assert main(argv + ["--eval-every", "2048", "--num-envs", "8", "--eval-episodes", "4"]) == 0, capsys.readouterr()
    assert _states(out) == {0: "COMPLETE", 1: "COMPLETE"}
    for trial in (0, 1):
        result = json.loads((out / f"trials/{trial}/s0/result.json").read_text())
        assert result["launcher"] == "anakin" and result["env_steps"] >= 4096, result  # (not the replay path)
    preset = json.loads((out / "best_preset.json").read_text())
    assert preset["env"] == "gymnax:CartPole-v1" and "learning_rate" in preset["settings"]


def test_a_trial_keeps_only_its_last_learner_checkpoint(tmp_path):
    from shoal.launch.experiments.tune.trials import _keep_last_learner_checkpoint

    learner = tmp_path / "checkpoints" / "learner"
    for step in ("2048", "10240", "4096"):
        (learner / step).mkdir(parents=True)
    (learner / "tmp").mkdir()  # (not a step: left alone)
    _keep_last_learner_checkpoint(str(tmp_path))
    assert sorted(p.name for p in learner.iterdir()) == ["10240", "tmp"]
    _keep_last_learner_checkpoint(str(tmp_path / "no-run"))  # (a run that wrote none: nothing to do)


@pytest.mark.ray  # (a local Ray started by each shoal tune)
@pytest.mark.e2e  # (real training: trials as Ray tasks, the study in this process's actor)
def test_trials_as_ray_tasks_are_pruned_resumed_and_stopped(tmp_path):
    pytest.importorskip("ray", reason="--launcher ray needs the ray extra")
    # a tune of one trial in a process, resumed as Ray tasks: its second (enqueued) trial cannot
    # learn (1e-9) and is pruned through the study's actor
    space = "space:\n  learning_rate: {low: 1.0e-9, high: 1.0e-2, log: true}\n"
    space += "first_trials:\n  - {learning_rate: 0.004}\n  - {learning_rate: 1.0e-9}\n"
    out = tmp_path / "tune"
    argv = ["--agent", "dqn", "--space", _space(tmp_path / "s.yaml", space), "--out", str(out), *TINY]
    first = run_shoal("tune", *argv, "--trials", "1", timeout=300)
    assert first.returncode == 0 and _states(out) == {0: "COMPLETE", 1: "WAITING"}, first.stderr
    resumed = run_shoal("tune", "--resume", str(out), "--trials", "2", "--launcher", "ray", timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert _states(out) == {0: "COMPLETE", 1: "PRUNED"}, resumed.stderr
    assert "trial 1 pruned (learning_rate=1e-09)" in resumed.stderr
    assert (out / "trials/1/s0/eval.csv").is_file() and (out / "best_preset.json").is_file()
    # SIGTERM: trial 0 ends at the target return, trial 1 (1e-9) never would; stopped mid-run,
    # it is interrupted (failed with no error), the finished one kept
    stopped = tmp_path / "stopped"
    argv = ["--agent", "dqn", "--space", _space(tmp_path / "s.yaml", space), "--out", str(stopped), *TINY]
    argv += ["--trials", "3", "--launcher", "ray", "--no-prune", "--target-return", "150"]
    argv += ["--max-env-steps", "1000000"]  # (after TINY's: trial 1 runs until it is stopped)
    tune = start_shoal("tune", *argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stdout, stderr = _sigterm_mid_trial_1(tune, stopped)
    assert tune.returncode == 143, stderr
    summary = json.loads(stdout.strip().splitlines()[-1])
    assert summary["terminated"] == "SIGTERM" and summary["trials"] == {"complete": 1, "interrupted": 1}, summary
    assert _states(stopped) == {0: "COMPLETE", 1: "FAIL"}, stderr
    assert "error" not in studies.load(str(stopped)).trials[1].user_attrs  # (interrupted: not counted)
    assert "trial 1 interrupted" in stderr


def test_a_text_choice_that_suits_another_combination_is_not_refused():
    """``activation=relu`` is refused with the frames' default torso (a convolutional one has no
    activation to set) but suits ``torso=mlp``: the space is taken, only such trials fail."""
    pytest.importorskip("minatar")
    from shoal.agents import config_class
    from shoal.launch.experiments.tune.spaces import check_space
    from shoal.launch.experiments.tune.study import TuneSettings, check_settings

    space = {"activation": {"choices": ["tanh", "relu"]}, "torso": {"choices": ["auto", "mlp"]}}
    settings = TuneSettings(
        agent="ppo",
        env_id="MinAtar/Breakout-v1",
        trials=4,
        space=check_space("ppo", config_class("ppo"), space),
        experiment={"max_env_steps": 100_000},
    )
    check_settings(settings, "s.yaml")
    bad = dataclasses.replace(
        settings, space=check_space("ppo", config_class("ppo"), {"torso": {"choices": ["mlp", "resnet"]}})
    )
    with pytest.raises(ValueError, match="s.yaml: torso='resnet' is refused: torso must be one of"):
        check_settings(bad, "s.yaml")
