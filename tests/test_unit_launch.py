"""Unit tests of the launch layer's tables and checks, in this process: the ``SHOAL_*``
environment variables, the schemas of a run directory's state files, and every public entry
point refusing bad input in one line before anything is written."""

import contextlib
import copy
import io
import json

import pytest

from shoal.agents import get_builder
from shoal.core import environment_variables as variables
from shoal.launch import (
    ExperimentConfig,
    Program,
    launch,
    resume_experiment,
    run_distributed_experiment,
    run_experiment,
)
from shoal.launch.experiments.cli.main import main
from shoal.launch.experiments.config import experiment_config
from shoal.launch.experiments.run_directory.config_record import flat_record
from shoal.launch.experiments.run_directory.schemas import check_config, check_run

# --- the SHOAL_* variables: (name, a good text, what it parses to, a bad text)
VARIABLES = [
    ("SHOAL_RPC_MAX_MESSAGE_MB", "512", 512.0, "2048"),
    ("SHOAL_PEER_TIMEOUT_S", "1.5", 1.5, "0.5"),
    ("SHOAL_STEP_TIMEOUT_S", "90", 90.0, "0"),
    ("SHOAL_EVAL_MAX_EPISODE_STEPS", "27000", 27000, "0"),
    ("SHOAL_COMPILATION_CACHE", "off", "off", "{file}"),
    ("SHOAL_PARAMS_VIA", "rpc", "rpc", "shm"),
    ("SHOAL_REPLAY_VIA", "rpc", "rpc", "grpc"),
    ("SHOAL_TOKEN", "s3cret!~", "s3cret!~", "tab\there"),
    ("SHOAL_PORTS", "50000-50010", (50000, 50010), "50010-50000"),
    ("SHOAL_NODE_START", "3", 3, "0"),
    ("SHOAL_BIND_HOST", "0.0.0.0", "0.0.0.0", "a host"),
    ("SHOAL_PACK_BATCHES", "0", "0", "yes"),
    ("SHOAL_ADVERTISE_HOST", "10.0.0.2", "10.0.0.2", "x" * 256),
]


def test_the_table_is_the_one_tested_here():
    assert sorted(name for name, *_ in VARIABLES) == sorted(variables.VARIABLES), (
        "a SHOAL_* variable was added or removed: add it to VARIABLES above"
    )


@pytest.mark.parametrize("name, good, parsed, bad", VARIABLES, ids=[v[0] for v in VARIABLES])
def test_each_variable_parses_defaults_and_refuses_in_one_line(name, good, parsed, bad, tmp_path):
    (tmp_path / "file").write_text("")
    bad = bad.format(file=tmp_path / "file")
    default = variables.VARIABLES[name].default
    assert variables.value(name, {}) == default and variables.value(name, {name: ""}) == default
    assert variables.value(name, {name: good}) == parsed
    with pytest.raises(ValueError) as refused:
        variables.value(name, {name: bad})
    assert str(refused.value) == (
        f"environment variable {name}={bad[:100]!r} is not valid: expected {variables.VARIABLES[name].accepted}"
    )
    with pytest.raises(ValueError, match=name):
        variables.check_environment({"SHOAL_PARAMS_VIA": "auto", name: bad})


def test_check_environment_passes_an_environment_of_good_values_and_reads_os_environ(monkeypatch):
    variables.check_environment({name: good for name, good, _, _ in VARIABLES})
    monkeypatch.setenv("SHOAL_PEER_TIMEOUT_S", "nan")
    with pytest.raises(ValueError, match="SHOAL_PEER_TIMEOUT_S='nan'"):
        variables.check_environment()
    assert variables.value("SHOAL_PEER_TIMEOUT_S", {}) == 60.0  # (a mapping given: os.environ not read)


def test_a_long_bad_value_is_cut_in_the_message():
    with pytest.raises(ValueError) as refused:
        variables.value("SHOAL_TOKEN", {"SHOAL_TOKEN": " " * 5000})
    assert len(str(refused.value)) < 400


# --- run-file schemas: config.json and checkpoints/run.json


@pytest.fixture(scope="module")
def saved_config():
    """A config.json as a run writes it (the config's own ``to_dict``, through JSON)."""
    config = ExperimentConfig.from_flat(
        builder=get_builder("ppo"), env_id="CartPole-v1", run_dir="/tmp/run", preset="ppo/classic"
    )
    return json.loads(json.dumps({**config.to_dict(), "launch": None}))


RUN = {
    "env_steps": 4096,
    "learner_step": 12,
    "learner_version": 12,
    "learner_digest": "ab12",
    "agent": "dqn",
    "spec": {"observation": [4]},
    "counter": {"env_steps": 4096, "episodes": 3},
    "actors": {"actor": {"env_steps": 4096, "key": [0, 42]}},
    "evaluator": {"next": 6000, "num_evals": 2, "last_return": 21.5, "last_at": 4000, "eval_s": 0.25},
    "replay_checkpoint": "2026-11-23T21-00-00",
    "replay_items": {"priority_table": 4000},
}


@pytest.fixture(scope="module")
def saved_v1_config(saved_config):
    """The same config as a run written before the groups wrote it (schema version 1: flat)."""
    return flat_record(saved_config)


def test_what_a_run_writes_passes_its_schema(saved_config, saved_v1_config):
    check_config("config.json", saved_config)
    check_config("config.json", saved_v1_config)
    check_run("run.json", RUN)
    check_run("run.json", {**RUN, "evaluator": None, "replay_checkpoint": None, "unknown_key": [1]})


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda c: c.update(seed=1.5), "seed must be an integer, got 1.5"),
        (lambda c: c.update(seed=True), "seed must be an integer, got true"),
        (lambda c: c.update(target_return="high"), 'target_return must be a finite number or null, got "high"'),
        (lambda c: c.update(env_id=7), "env_id must be a string, got 7"),
        (
            lambda c: c.update(agent="a2c"),
            "agent: unknown agent 'a2c'; available: bc, cql, dqn, impala, iql, ppo, r2d2, sac, or module:BuilderClass",
        ),
        (lambda c: c["agent_config"].update(learning_rat=1e-3), "agent_config.learning_rat must be a ppo setting"),
        (
            lambda c: c["agent_config"].update(hidden_sizes=[64, "x"]),
            "agent_config.hidden_sizes must be a list of integers",
        ),
        (lambda c: c.update(launch=[]), "launch must be an object or null, got []"),
    ],
)
def test_a_config_of_the_wrong_shape_is_one_line_naming_file_and_field(saved_v1_config, change, message):
    broken = copy.deepcopy(saved_v1_config)
    change(broken)
    with pytest.raises(ValueError) as refused:
        check_config("run/config.json", broken)
    assert str(refused.value).startswith(f"run/config.json: {message}") and "\n" not in str(refused.value)


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda r: r.pop("learner_digest"), "learner_digest is missing; the checkpoint record is incomplete"),
        (lambda r: r.update(env_steps=-1), "env_steps must be a number >= 0, got -1"),
        (lambda r: r.update(spec=None), "spec must be an object, got null"),
        (lambda r: r["counter"].update(env_steps=2**53), "counter.env_steps must be an integer in [0, 2**53)"),
        (lambda r: r["counter"].update(episodes=1.0), "counter.episodes must be an integer in [0, 2**53), got 1.0"),
        (lambda r: r["evaluator"].update(last_return=float("inf")), "evaluator.last_return must be a finite number"),
        (lambda r: r["actors"]["actor"].update(key=[0, 1.5]), "actors.actor.key must be a list of integers"),
        (lambda r: r["actors"]["actor"].update(env_steps=-8), "actors.actor.env_steps must be a number >= 0"),
        (lambda r: r.update(replay_checkpoint="../elsewhere"), "replay_checkpoint must be the name of a directory"),
        (lambda r: r.update(replay_items={"t": "4000"}), 'replay_items.t must be an integer, got "4000"'),
        (lambda r: r.update(actors={"actor": "x" * 100}), 'actors.actor must be an object, got "' + "x" * 59 + "..."),
    ],
)
def test_a_run_record_of_the_wrong_shape_is_one_line_naming_file_and_field(change, message):
    broken = copy.deepcopy(RUN)
    change(broken)
    with pytest.raises(ValueError) as refused:
        check_run("run/checkpoints/run.json", broken)
    assert str(refused.value).startswith(f"run/checkpoints/run.json: {message}") and "\n" not in str(refused.value)


def test_a_file_that_is_not_an_object_is_refused():
    with pytest.raises(ValueError, match="^c.json: the config must be an object, got \\[\\]$"):
        check_config("c.json", [])
    with pytest.raises(ValueError, match="^r.json: the checkpoint record must be an object, got null$"):
        check_run("r.json", None)


# --- every public entry point: bad input is one line, and nothing is written


def shoal(*args):
    """``main(args)`` in this process: (exit status, stderr's lines)."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            rc = main(list(args))
        except SystemExit as exit:  # (argparse's own errors)
            rc = exit.code
    return rc, err.getvalue().strip().splitlines()


@pytest.mark.parametrize(
    "args, message",
    [
        ([], "the following arguments are required: command"),
        (["bogus"], "argument command: invalid choice: 'bogus'"),
        (["train", "--agent", "nope"], "unknown agent 'nope'; available: bc, cql, dqn, impala, iql, ppo, r2d2, sac"),
        (["train", "--env", "NoSuchEnv-v0"], "unknown gymnasium environment id 'NoSuchEnv-v0'"),
        (["train", "--preset", "nope"], "dqn has no preset 'nope'; its presets:"),
        (["train", "--set", "nope=1"], "unknown setting 'nope'"),
        (["train", "--resume", "{tmp}/missing"], "is not a Shoal run directory (no config.json in it)"),
        (["status", "{tmp}/missing"], "is not the run directory of a running distributed program"),
        (["scale", "{tmp}/missing", "--actors", "2"], "is not the run directory of a running distributed program"),
    ],
)
def test_the_cli_refuses_bad_input_in_one_line(args, message, tmp_path):
    args = [a.format(tmp=tmp_path) for a in args]
    if args[:1] == ["train"] and "--resume" not in args:
        args += ["--run-dir", str(tmp_path / "run"), "--quiet"]
    rc, lines = shoal(*args)
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("shoal: error: ") and message in lines[0], lines
    assert not (tmp_path / "run").exists()


def config(tmp_path, **changes):
    return ExperimentConfig.from_flat(
        builder=get_builder("dqn"), env_id="CartPole-v1", run_dir=str(tmp_path / "run"), progress=False, **changes
    )


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda tmp: run_experiment(config(tmp, num_envs=0)), "num_envs must be an integer in [1, 4096], got 0"),
        (
            lambda tmp: run_experiment(
                ExperimentConfig.from_flat(builder=get_builder("sac"), env_id="CartPole-v1", run_dir=str(tmp / "run"))
            ),
            "SAC needs a 1-d continuous",
        ),
        (lambda tmp: run_distributed_experiment(config(tmp), num_actors=0), "num_actors must be an integer in [1, "),
        (lambda tmp: run_distributed_experiment(config(tmp), launcher="slurm"), "unknown launcher 'slurm'"),
        (lambda tmp: resume_experiment(str(tmp / "run")), "is not a Shoal run directory (no config.json in it)"),
        (lambda tmp: experiment_config("dqn", "CartPole-v1", "mujoco"), "dqn has no preset 'mujoco'"),
        (
            lambda tmp: experiment_config("dqn", "CartPole-v1", agent_settings={"nope": 1}),
            "unknown dqn setting(s) nope",
        ),
        (
            lambda tmp: run_experiment(
                ExperimentConfig.from_flat(
                    builder=get_builder("dqn", learning_rate=2.0), env_id="CartPole-v1", run_dir=str(tmp / "run")
                )
            ),
            "learning_rate must be a finite number",
        ),
        (lambda tmp: launch(Program("empty"), "inprocess"), "has no nodes"),
    ],
)
def test_the_python_api_refuses_bad_input_in_one_line(call, message, tmp_path):
    with pytest.raises(ValueError) as refused:
        call(tmp_path)
    assert message in str(refused.value) and "\n" not in str(refused.value)
    assert not (tmp_path / "run").exists()
