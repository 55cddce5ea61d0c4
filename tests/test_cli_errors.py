"""Bad settings: one clear error line, a non-zero exit, and nothing trained or written."""

import os
import subprocess
import sys

import pytest


def run_cli(args, tmp_path, extra_env=None):
    run_dir = tmp_path / "run"
    env = dict(os.environ, **(extra_env or {}))
    proc = subprocess.run([sys.executable, "-m", "shoal", "train", *args,
                           "--run-dir", str(run_dir)], capture_output=True, text=True,
                          timeout=120, env=env)
    return proc, run_dir


@pytest.mark.parametrize("args, expected", [
    (["--env", "CartPol-v1"], "unknown gymnasium environment id 'CartPol-v1'; did you mean 'CartPole-v1'"),
    (["--env", "Pendulum-v1"], "DQN needs a discrete action space"),
    (["--max-env-steps", "0"], "max_env_steps must be a positive integer, got 0"),
    (["--max-env-steps", "-5"], "max_env_steps must be a positive integer, got -5"),
    (["--set", "learning_rate=fast"], "--set learning_rate='fast': expected a float"),
])
def test_bad_input_fails_early(args, expected, tmp_path):
    proc, run_dir = run_cli(args, tmp_path)
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("shoal: error:")]
    assert len(errors) == 1 and expected in errors[0], proc.stderr[-2000:]
    assert proc.stdout == ""
    assert not run_dir.exists()


def test_batch_not_divisible_by_devices(tmp_path):
    proc, run_dir = run_cli(["--set", "batch_size=63"], tmp_path,
                            {"XLA_FLAGS": "--xla_force_host_platform_device_count=2"})
    assert proc.returncode == 2
    assert "shoal: error: batch_size=63 must be a positive multiple of the number of local devices (2)" in proc.stderr
    assert not run_dir.exists()


def test_missing_extra_names_the_install_command(tmp_path):
    # Shadow Box2D with a package that fails to import, as if the box2d extra were not installed.
    fake = tmp_path / "site"
    (fake / "Box2D").mkdir(parents=True)
    (fake / "Box2D" / "__init__.py").write_text("raise ImportError('no Box2D here')\n")
    pythonpath = os.pathsep.join([str(fake), os.environ.get("PYTHONPATH", "")])
    proc, run_dir = run_cli(["--agent", "ppo", "--env", "LunarLander-v3"], tmp_path, {"PYTHONPATH": pythonpath})
    assert proc.returncode == 2, proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("shoal: error:")]
    assert errors == ["shoal: error: LunarLander-v3 needs the 'box2d' extra, which is not installed; "
                      "run pip install -e '.[box2d]' (from the Shoal repository)"], proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and not run_dir.exists()


@pytest.mark.parametrize("agent, env, expected", [
    ("ppo", "Pendulum-v1", "PPO here takes a discrete action space"),
    ("impala", "Pendulum-v1", "IMPALA here takes a discrete action space"),
    ("sac", "CartPole-v1", "SAC needs a 1-d continuous (Box) action space"),
    ("ppo", "CartPole-v1", "num_minibatches=5 must divide rollout_length=32"),
    ("a2c", "CartPole-v1", "unknown agent 'a2c'; available: dqn, impala, ppo, sac"),
])
def test_agents_refuse_what_they_cannot_run(agent, env, expected, tmp_path):
    extra = ["--set", "num_minibatches=5"] if "num_minibatches" in expected else []
    proc, run_dir = run_cli(["--agent", agent, "--env", env, *extra], tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("shoal: error:")]
    assert len(errors) == 1 and expected in errors[0], proc.stderr[-2000:]
    assert not run_dir.exists()
