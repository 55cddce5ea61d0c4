"""Bad settings: one clear error line, a non-zero exit, and nothing trained or written."""

import contextlib
import io
import os

import pytest

from shoal.launch.experiments.cli.main import main
from tests.shoal_cli import run_shoal


def run_cli(args, tmp_path, extra_env=None):
    run_dir = tmp_path / "run"
    env = dict(os.environ, **(extra_env or {}))
    proc = run_shoal("train", *args, "--run-dir", str(run_dir), timeout=120, env=env)
    return proc, run_dir


@pytest.mark.e2e  # (`shoal train` in a subprocess, as a user types it)
@pytest.mark.parametrize(
    "args, expected",
    [
        (["--env", "CartPol-v1"], "unknown gymnasium environment id 'CartPol-v1'; did you mean 'CartPole-v1'"),
        (["--env", "Pendulum-v1"], "DQN needs a discrete action space"),
        (["--max-env-steps", "-5"], "max_env_steps must be an integer in [1, 10000000000000], got -5"),
        (["--set", "learning_rate=fast"], "--set learning_rate='fast': expected a float"),
    ],
)
def test_bad_input_fails_early(args, expected, tmp_path):
    proc, run_dir = run_cli(args, tmp_path)
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("shoal: error:")]
    assert len(errors) == 1 and expected in errors[0], proc.stderr[-2000:]
    assert proc.stdout == ""
    assert not run_dir.exists()


@pytest.mark.e2e  # (`shoal train` in a subprocess, as a user types it)
def test_batch_not_divisible_by_devices(tmp_path):
    proc, run_dir = run_cli(
        ["--set", "batch_size=63"], tmp_path, {"XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    )
    assert proc.returncode == 2
    assert "shoal: error: batch_size=63 must be a positive multiple of the number of local devices (2)" in proc.stderr
    assert not run_dir.exists()


@pytest.mark.e2e  # (`shoal train` in a subprocess, as a user types it)
def test_missing_extra_names_the_install_command(tmp_path):
    # Shadow Box2D with a package that fails to import, as if the box2d extra were not installed.
    fake = tmp_path / "site"
    (fake / "Box2D").mkdir(parents=True)
    (fake / "Box2D" / "__init__.py").write_text("raise ImportError('no Box2D here')\n")
    pythonpath = os.pathsep.join([str(fake), os.environ.get("PYTHONPATH", "")])
    proc, run_dir = run_cli(["--agent", "ppo", "--env", "LunarLander-v3"], tmp_path, {"PYTHONPATH": pythonpath})
    assert proc.returncode == 2, proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("shoal: error:")]
    assert errors == [
        "shoal: error: LunarLander-v3 needs the 'box2d' extra, which is not installed; "
        "run pip install -e '.[box2d]' (from the Shoal repository)"
    ], proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and not run_dir.exists()


@pytest.mark.e2e  # (`shoal train` in a subprocess, as a user types it)
@pytest.mark.parametrize(
    "agent, env, expected",
    [
        ("impala", "Pendulum-v1", "IMPALA here takes a discrete action space"),
        ("sac", "CartPole-v1", "SAC needs a 1-d continuous (Box) action space"),
        ("ppo", "CartPole-v1", "num_minibatches=5 must divide rollout_length=32"),
        ("a2c", "CartPole-v1", "unknown agent 'a2c'; available: bc, cql, dqn, impala, iql, ppo, r2d2, sac"),
    ],
)
def test_agents_refuse_what_they_cannot_run(agent, env, expected, tmp_path):
    extra = ["--set", "num_minibatches=5"] if "num_minibatches" in expected else []
    proc, run_dir = run_cli(["--agent", agent, "--env", env, *extra], tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("shoal: error:")]
    assert len(errors) == 1 and expected in errors[0], proc.stderr[-2000:]
    assert not run_dir.exists()


@pytest.mark.parametrize(
    "args, expected",
    [
        (
            ["--set", "samples_per_insert=1e9"],
            "samples_per_insert must be a finite number in (0, 10000], got 1000000000.0",
        ),
        (["--set", "learning_rate=-1"], "learning_rate must be a finite number in (0, 1], got -1.0"),
        (["--set", "learning_rate=nan"], "learning_rate must be a finite number in (0, 1], got nan"),
        (["--set", "discount=1.5"], "discount must be a finite number in [0, 1], got 1.5"),
        (["--set", "epsilon_start=2"], "epsilon_start must be a finite number in [0, 1], got 2.0"),
        (["--set", "epsilon_decay_steps=0"], "epsilon_decay_steps must be an integer in [1, inf), got 0"),
        (["--set", "huber_delta=0"], "huber_delta must be a finite number in (0, inf), got 0.0"),
        (["--set", "max_gradient_norm=-1"], "max_gradient_norm must be a finite number in (0, inf), got -1.0"),
        (["--set", "hidden_sizes=0"], "hidden_sizes must be an integer in [1, 65536], got (0,)"),
        (["--set", "variable_update_period=0"], "variable_update_period must be an integer in [1, 1000000], got 0"),
        (["--target-return", "nan"], "target_return must be a finite number"),
        (["--seed", "-1"], "seed must be an integer in [0, 2147483647], got -1"),
        (["--max-env-steps", "0"], "max_env_steps must be an integer in [1, 10000000000000], got 0"),
        (["--eval-episodes", "0"], "eval_episodes must be an integer in [1, 10000], got 0"),
        (["--num-envs", "0"], "num_envs must be an integer in [1, 4096], got 0"),
        (["--checkpoint-every", "-1"], "checkpoint_every_s must be a finite number in (0, 10000000], got -1.0"),
        (["--num-actors", "100000", "--launcher", "processes"], "--num-actors must be an integer in [1, "),
        (
            ["--ports", "80-90", "--launcher", "processes"],
            "--ports: ports are FIRST-LAST with 1024 <= FIRST <= LAST <= 65535",
        ),
        (["--ports", "5000-4000", "--launcher", "processes"], "got '5000-4000'"),
        (
            ["--set", "min_replay_size=5000", "--max-env-steps", "1000"],
            "max_env_steps=1000 is below the 5032 env steps dqn takes before its first update",
        ),
    ],
)
def test_every_setting_is_range_checked_before_anything_is_written(args, expected, tmp_path):
    run_dir, err = tmp_path / "run", io.StringIO()
    with contextlib.redirect_stderr(err):  # (in this process: the CLI's checks, without 18 interpreter starts)
        rc = main(["train", "--agent", "dqn", "--env", "CartPole-v1", "--run-dir", str(run_dir), *args])
    errors = [line for line in err.getvalue().splitlines() if line.startswith("shoal: error:")]
    assert rc == 2 and len(errors) == 1 and expected in errors[0], err.getvalue()[-2000:]
    assert not run_dir.exists()
