"""Environments as users have them: constructor arguments (``--env-arg``) and factories of their
own (``ExperimentConfig.env_factory``), in one process and in a run of processes; bad ones get
one line before anything starts."""

from __future__ import annotations

import json

import pytest

from shoal.agents import get_builder
from shoal.envs.env_sources import load_env_factory, parse_env_value
from shoal.envs.environments import environment_spec, make_vector_env
from shoal.launch import ExperimentConfig, run_experiment
from shoal.launch.experiments.run_directory.config_record import flat_record
from tests.faults.harness import shoal_main


@pytest.mark.parametrize(
    "text, value",
    [
        ("3", 3),
        ("0.5", 0.5),
        ("true", True),
        ("False", False),
        ("None", None),
        ("(1, 2)", (1, 2)),
        ("'x'", "x"),
        ("rgb_array", "rgb_array"),
    ],
)
def test_env_arg_values_read_as_literals(text, value):
    assert parse_env_value(text) == value


def test_env_args_reach_the_constructor_and_the_spec():
    spec = environment_spec("LunarLander-v3", 2, {"continuous": True})
    assert spec.num_actions is None and spec.action.shape == (2,) and spec.num_envs == 2
    env = make_vector_env("LunarLander-v3", 2, seed=0, env_args={"continuous": True})
    try:
        assert env.single_action_space.shape == (2,)
    finally:
        env.close()


def test_a_factory_makes_every_env_and_its_wrapper_holds():
    env = make_vector_env("short", 2, seed=0, env_factory="tests.user_envs:short_cartpole", env_args={"max_steps": 5})
    try:
        env.reset(seed=0)
        for _ in range(5):
            _, _, terminated, truncated, _ = env.step(env.action_space.sample())
        assert (terminated | truncated).all()  # (the factory's TimeLimit of 5 steps)
    finally:
        env.close()


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--env", "LunarLander-v3", "--env-arg", "speed=3"],
            "LunarLander-v3 takes no argument 'speed' (--env-arg); its arguments: continuous, enable_wind",
        ),
        (["--env", "CartPole-v1", "--env-arg", "noequals"], "--env-arg takes KEY=VALUE"),
        (
            ["--env", "LunarLander-v3", "--env-arg", "gravity='down'"],
            "LunarLander-v3's argument gravity is a number (default -10.0); --env-arg gravity='down' is not a finite number",
        ),
        (["--env", "LunarLander-v3", "--env-arg", "gravity=-20"], "LunarLander-v3 with arguments {'gravity': -20}"),
    ],
)
def test_bad_env_arguments_are_one_line_before_anything_runs(tmp_path, args, message):
    rc, errors, text = shoal_main("train", *args, "--run-dir", str(tmp_path / "run"), "--quiet")
    assert rc == 2 and len(errors) == 1 and message in errors[0], text
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "factory, message",
    [
        ("no_such_module_xyz:make", "cannot import 'no_such_module_xyz' for env_factory"),
        ("tests.user_envs:missing", "tests.user_envs has no callable 'missing'"),
        ("tests.user_envs", "env_factory must be a callable or 'module:function'"),
        ("tests.user_envs:not_an_env", "returned str, not a gymnasium.Env"),
    ],
)
def test_a_bad_factory_is_one_line(factory, message):
    config = ExperimentConfig.from_flat(builder=get_builder("dqn"), env_id="mine", env_factory=factory, num_envs=2)
    with pytest.raises(ValueError, match=message):
        config.validate_settings()
        config.environment_spec()


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--env-factory", "os:system", "--env-arg", "command='touch {marker}'"],
            "env_factory 'os:system': os is a module of Python's standard library, not an env's",
        ),
        (
            ["--env-factory", "tests.user_envs:shell", "--env-arg", "command='touch {marker}'"],
            "env_factory 'tests.user_envs:shell': shell is os.system, a built-in function",
        ),
        (
            ["--env-factory", "tests.user_envs:make_folder", "--env-arg", "name='{marker}'"],
            "env_factory 'tests.user_envs:make_folder': make_folder is os.makedirs, a function of Python's standard library",
        ),
        (
            ["--env", "this:CartPole-v1"],
            "environment 'this:CartPole-v1': this is a module of Python's standard library",
        ),
    ],
)
def test_an_env_source_that_is_no_env_is_refused_before_it_is_imported_or_called(tmp_path, args, message):
    import sys

    marker = tmp_path / "called"
    args = [arg.format(marker=marker) for arg in args]
    rc, errors, text = shoal_main("train", *args, "--run-dir", str(tmp_path / "run"), "--quiet")
    assert rc == 2 and len(errors) == 1 and message in errors[0], text
    assert not marker.exists() and not (tmp_path / "run").exists() and "this" not in sys.modules


@pytest.mark.parametrize(
    "factory, max_steps", [("tests.user_envs:three_step_cartpole", 3), ("tests.user_envs:cartpole_maker", 50)]
)
def test_a_factory_named_as_a_partial_or_a_callable_instance_is_called(factory, max_steps):
    """The check is a deny-list (the standard library, built-ins): a partial of a function of
    yours, or an instance of a class of yours, is called as named."""
    env = make_vector_env("short", 1, seed=0, env_factory=factory)
    try:
        env.reset(seed=0)
        steps = 0
        while True:
            steps += 1
            _, _, terminated, truncated, _ = env.step(env.action_space.sample())
            if terminated[0] or truncated[0]:
                break
        assert steps <= max_steps
        assert load_env_factory(factory).__class__.__name__ in ("partial", "CartPoleMaker")
    finally:
        env.close()
    with pytest.raises(
        ValueError, match="env_factory 'tests.user_envs:shell_partial': shell_partial is os.system, a built-in function"
    ):
        load_env_factory("tests.user_envs:shell_partial")  # (a partial of a built-in: refused as the built-in)


def test_a_factory_is_recorded_by_its_path():
    from tests.user_envs import short_cartpole

    config = ExperimentConfig.from_flat(builder=get_builder("dqn"), env_id="short", env_factory=short_cartpole)
    assert config.to_dict()["env"]["factory"] == "tests.user_envs:short_cartpole"
    assert load_env_factory("tests.user_envs:short_cartpole") is short_cartpole


@pytest.mark.e2e
def test_a_factory_with_a_wrapper_trains_in_one_process_and_resumes(tmp_path):
    config = ExperimentConfig.from_flat(
        builder=get_builder("dqn", min_replay_size=200),
        env_id="short-cartpole",
        env_factory="tests.user_envs:short_cartpole",
        env_args={"max_steps": 30},
        num_envs=4,
        max_env_steps=800,
        eval_every=800,
        eval_episodes=4,
        run_dir=str(tmp_path / "run"),
        progress=False,
    )
    result = run_experiment(config)
    assert result["env_steps"] >= 800 and 0 < result["final_eval_return"] <= 30  # (the wrapper's limit)
    saved = flat_record(json.loads((tmp_path / "run" / "config.json").read_text()))  # (read by flat name)
    assert saved["env_factory"] == "tests.user_envs:short_cartpole" and saved["env_args"] == {"max_steps": 30}
    rc, errors, text = shoal_main(
        "train",
        "--resume",
        str(tmp_path / "run"),
        "--env-factory",  # (named again)
        "tests.user_envs:short_cartpole",
        "--max-env-steps",
        "1200",
        "--quiet",
    )
    assert rc == 0 and not errors, text


@pytest.mark.e2e
def test_env_args_from_the_cli_train_and_are_recorded(tmp_path):
    rc, errors, text = shoal_main(
        "train",
        "--agent",
        "dqn",
        "--env",
        "CartPole-v1",
        "--env-arg",
        "max_episode_steps=20",
        "--num-envs",
        "4",
        "--max-env-steps",
        "800",
        "--eval-every",
        "800",
        "--eval-episodes",
        "4",
        "--target-return",
        "1e9",
        "--set",
        "min_replay_size=200",
        "--quiet",
        "--run-dir",
        str(tmp_path / "run"),
    )
    assert rc == 0 and not errors, text
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    assert result["env_steps"] >= 800 and 0 < result["final_eval_return"] <= 20  # (the evaluation env's limit too)
    assert flat_record(json.loads((tmp_path / "run" / "config.json").read_text()))["env_args"] == {
        "max_episode_steps": 20
    }


@pytest.mark.e2e
def test_a_factory_and_its_args_train_under_processes_and_reach_every_node(tmp_path):
    """Two actor processes and an evaluator process, each making its envs with the factory."""
    from shoal.launch import run_distributed_experiment

    config = ExperimentConfig.from_flat(
        builder=get_builder("dqn", min_replay_size=200),
        env_id="short-cartpole",
        env_factory="tests.user_envs:short_cartpole",
        env_args={"max_steps": 20},
        num_envs=4,
        max_env_steps=1200,
        eval_every=1200,
        eval_episodes=4,
        run_dir=str(tmp_path / "run"),
        progress=False,
    )
    result = run_distributed_experiment(config, num_actors=2, launcher="processes")
    assert result["env_steps"] >= 1200 and 0 < result["final_eval_return"] <= 20  # (the evaluator's env)
