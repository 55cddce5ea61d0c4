"""``ExperimentConfig`` in groups, ``config.json``'s schema version, and the runs written before it.

``tests/data/v1_run`` is a real run directory's ``config.json`` (with its ``eval.csv`` and
``result.json``) as Shoal wrote it before the groups (schema version 1: every field flat, no
version), made by ``shoal train --agent dqn --env CartPole-v1 --seed 0 --max-env-steps 2000``
(its ``run_dir`` set to a relative path). Its checkpoints are not kept (a learner and a replay
checkpoint, ~170 KB): that a v1 directory still resumes, evaluates and exports is checked on a
fresh run whose ``config.json`` is rewritten into the v1 layout.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil

import pytest

from shoal.agents import get_builder
from shoal.launch import (
    EnvConfig,
    EvaluationConfig,
    ExperimentConfig,
    RunConfig,
    TrackingConfig,
    evaluate_run,
    export_policy,
    run_experiment,
)
from shoal.launch.experiments.cli.main import main
from shoal.launch.experiments.config import config_from_dict, experiment_config
from shoal.launch.experiments.config_groups import FLAT_FIELDS, GROUPS
from shoal.launch.experiments.run_directory.config_record import SCHEMA_VERSION, flat_record, grouped_record
from shoal.launch.experiments.run_directory.schemas import check_config
from tests.faults.harness import shoal_main

V1_RUN = os.path.join(os.path.dirname(__file__), "data", "v1_run")


def _v1() -> dict:
    with open(os.path.join(V1_RUN, "config.json")) as f:
        return json.load(f)


def _copy_v1(tmp_path):
    run_dir = tmp_path / "v1"
    shutil.copytree(V1_RUN, run_dir)
    os.chmod(run_dir, 0o755)
    for name in os.listdir(run_dir):
        os.chmod(run_dir / name, 0o644)
    return run_dir


def test_the_top_level_holds_the_groups_and_each_setting_has_one_flat_name():
    top = [f.name for f in dataclasses.fields(ExperimentConfig)]
    assert len(top) <= 12 and set(GROUPS) <= set(top), top
    group_fields = {(name, f.name) for name, kind in GROUPS.items() for f in dataclasses.fields(kind)}
    assert {where for where in FLAT_FIELDS.values() if where[0] is not None} == group_fields
    assert len(set(FLAT_FIELDS.values())) == len(FLAT_FIELDS)  # (one flat name per field)
    for kind in GROUPS.values():
        assert kind.__dataclass_params__.frozen, kind


def test_a_v1_config_json_loads_to_the_grouped_config_the_same_flags_make():
    saved = _v1()
    assert "schema_version" not in saved and saved["env_id"] == "CartPole-v1"
    check_config("config.json", saved)
    loaded = config_from_dict(saved)
    made = experiment_config(
        "dqn", "CartPole-v1", seed=0, max_env_steps=2000, run_dir="runs/dqn-CartPole-v1-s0", replay="reverb"
    )
    for name in (*GROUPS, "preset"):
        assert getattr(loaded, name) == getattr(made, name), name
    assert loaded.builder.config == made.builder.config
    assert loaded.run == RunConfig(seed=0, max_env_steps=2000, dir="runs/dqn-CartPole-v1-s0")
    assert loaded.evaluation == EvaluationConfig(every=2000, episodes=10) and loaded.replay.backend == "reverb"
    # what a run writes now is the same record in version 2's layout, and reads back flat as it was
    grouped = grouped_record(saved)
    assert grouped["schema_version"] == SCHEMA_VERSION and grouped["env"]["id"] == "CartPole-v1"
    assert grouped["run"] == {
        "seed": 0,
        "max_env_steps": 2000,
        "dir": "runs/dqn-CartPole-v1-s0",
        "checkpoint_every_s": 300.0,
    }
    assert flat_record(grouped) == saved
    now = made.replace(replay=None).to_dict()  # (this Python's backend: Reverb need not be installed)
    for name in GROUPS:
        if name != "replay":  # (the backend: this Python's default; the fixture's ran on Reverb)
            # (fields newer than the fixture, at their defaults)
            newer = {"env": {"actor_overlap": "auto"}, "run": {"dataset": None, "record_dataset": None}}.get(name, {})
            assert {k: v for k, v in now[name].items() if newer.get(k, ...) != v} == grouped[name], name


def test_the_flat_names_build_and_change_a_config():
    config = ExperimentConfig.from_flat(
        get_builder("dqn"),
        env_id="CartPole-v1",
        num_envs=4,
        eval_every=500,
        run_dir="runs/x",
        track="wandb",
        self_play_pool=3,
    )
    assert config == ExperimentConfig(
        builder=config.builder,
        env=EnvConfig("CartPole-v1", num_envs=4),
        run=RunConfig(dir="runs/x"),
        evaluation=EvaluationConfig(every=500),
        tracking=TrackingConfig(tracker="wandb"),
        multiagent=dataclasses.replace(config.multiagent, self_play_pool=3),
    )
    changed = config.replace(max_env_steps=5, resume=True)
    assert changed.run == RunConfig(max_env_steps=5, dir="runs/x", resume=True) and config.run.max_env_steps == 100_000
    assert config.flat()["eval_every"] == 500 and config.flat()["env_id"] == "CartPole-v1"
    with pytest.raises(ValueError, match=r"^unknown experiment setting 'num_env'; known: action_masks, "):
        config.replace(num_env=2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.run.seed = 3  # type: ignore[misc]
    with pytest.raises(TypeError, match=r"^ExperimentConfig.env must be of type EnvConfig, got 'CartPole-v1'$"):
        ExperimentConfig(builder=config.builder, env="CartPole-v1")  # type: ignore[arg-type]


def test_the_flags_land_in_their_groups(capsys):
    assert (
        main(
            [
                "train",
                "--agent",
                "dqn",
                "--env",
                "CartPole-v1",
                "--seed",
                "3",
                "--num-envs",
                "4",
                "--max-env-steps",
                "3000",
                "--eval-every",
                "500",
                "--eval-episodes",
                "3",
                "--target-return",
                "100",
                "--checkpoint-every",
                "60",
                "--sticky-actions",
                "0.1",
                "--replay",
                "native",
                "--quiet",
                "--set",
                "learning_rate=0.001",
                "--run-dir",
                "runs/flags",
                "--dry-run",
            ]
        )
        == 0
    )
    resolved = json.loads(capsys.readouterr().out.splitlines()[0])
    assert resolved["schema_version"] == 2 and resolved["launch"] is None
    assert resolved["env"]["num_envs"] == 4 and resolved["env"]["sticky_actions"] == 0.1
    assert resolved["run"] == {
        "seed": 3,
        "max_env_steps": 3000,
        "dir": "runs/flags",
        "checkpoint_every_s": 60.0,
        "dataset": None,
        "record_dataset": None,
    }
    assert resolved["evaluation"] == {"every": 500, "episodes": 3, "target_return": 100.0}
    assert resolved["replay"] == {"backend": "native"} and resolved["tracking"]["progress"] is False
    assert resolved["agent_config"]["learning_rate"] == 0.001


@pytest.mark.parametrize(
    "change, says",
    [
        (lambda c: c["run"].update(seed=1.5), "run.seed must be an integer, got 1.5"),
        (lambda c: c["env"].update(id=7), "env.id must be a string, got 7"),
        (
            lambda c: c["evaluation"].update(target_return="high"),
            'evaluation.target_return must be a finite number or null, got "high"',
        ),
        (lambda c: c.update(env=[]), "env must be an object, got []"),
        (
            lambda c: c.update(schema_version=3),
            "schema_version 3 is newer than this Shoal reads (1 or 2): the run was "
            "written by a later Shoal; upgrade Shoal to use it",
        ),
        (lambda c: c.update(schema_version="2"), 'schema_version must be 1 or 2, got "2"'),
    ],
)
def test_a_v2_config_of_the_wrong_shape_is_one_line_naming_the_field_by_its_group(change, says):
    saved = json.loads(json.dumps(grouped_record(_v1())))
    change(saved)
    with pytest.raises(ValueError) as refused:
        check_config("run/config.json", saved)
    assert str(refused.value) == f"run/config.json: {says}"


def test_a_run_of_a_later_schema_is_refused_in_one_line_by_every_command(tmp_path):
    run_dir = _copy_v1(tmp_path)
    path = run_dir / "config.json"
    path.write_text(json.dumps({**grouped_record(_v1()), "schema_version": 7}))
    says = f"shoal: error: {path}: schema_version 7 is newer than this Shoal reads (1 or 2)"
    for command in (
        ["train", "--resume", str(run_dir)],
        ["status", str(run_dir)],
        ["evaluate", str(run_dir)],
        ["compare", str(run_dir), "--out", str(tmp_path / "out")],
    ):
        rc, errors, text = shoal_main(*command)
        assert rc == 2 and len(errors) == 1 and errors[0].startswith(says), (command, text)


def test_status_and_compare_read_the_v1_run(tmp_path, capsys):
    run_dir = _copy_v1(tmp_path)
    assert main(["status", str(run_dir)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "run: dqn on CartPole-v1, seed 0 (one process; reverb replay)", lines
    assert "env steps: 2,000 of 2,000" in lines
    assert (
        main(["compare", str(run_dir), "--by", "num_envs", "--out", str(tmp_path / "out"), "--bootstrap-samples", "20"])
        == 0
    )
    assert "num_envs=16" in capsys.readouterr().out


@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_a_run_directory_written_before_the_groups_resumes_evaluates_exports_and_shows(tmp_path, capsys):
    run_dir = tmp_path / "run"
    config = ExperimentConfig(
        builder=get_builder("dqn", min_replay_size=100),
        env=EnvConfig("CartPole-v1", num_envs=4),
        run=RunConfig(max_env_steps=400, dir=str(run_dir)),
        evaluation=EvaluationConfig(every=400, episodes=2, target_return=1e9),
        tracking=TrackingConfig(progress=False),
    )
    first = run_experiment(config)
    path = run_dir / "config.json"
    v2 = json.loads(path.read_text())
    v1 = flat_record(v2)  # (as the run would have written it before: flat, no schema_version)
    assert "schema_version" not in v1 and v1["num_envs"] == 4 and v1["eval_every"] == 400
    path.write_text(json.dumps(v1, indent=2))
    assert main(["status", str(run_dir)]) == 0
    assert "env steps: 400 of 400" in capsys.readouterr().out
    evaluated = evaluate_run(str(run_dir), episodes=2, seed=0)
    assert evaluated["env"] == "CartPole-v1" and evaluated["episodes"] == 2
    exported = export_policy(str(run_dir), str(tmp_path / "policy.jax"))
    assert exported["env"] == "CartPole-v1"
    assert main(["train", "--resume", str(run_dir), "--max-env-steps", "800", "--quiet"]) == 0
    resumed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert resumed["env_steps"] >= 800 and resumed["resumed_from"]["env_steps"] == first["env_steps"]
    assert json.loads(path.read_text()) == v1  # (a resume leaves the run's config.json as it was)
