"""The messages a hostile probe found lacking (issue 36, "Messages"): each names what it is about
-- the file, the owner's pid, the failed update -- and comes before anything starts or at once."""

import json
import os
import subprocess
import sys
import time

import pytest

from shoal.core.counting import Counter
from shoal.launch import Program, ServiceNode, launch
from shoal.launch.experiments.run_directory.directory import RunDirectory
from shoal.launch.experiments.tracking import RunTracker
from shoal.launch.programs.control import serve_control
from tests.faults.harness import errors
from tests.faults.harness import shoal_main as shoal
from tests.shoal_cli import run_shoal


def _run_dir(path, evals="env_steps,wall_s,eval_return\n10,1,5\n"):
    path.mkdir()
    (path / "config.json").write_text(
        json.dumps({"env_id": "CartPole-v1", "seed": 0, "agent": "dqn", "agent_config": {"lr": 1}})
    )
    if evals is not None:
        (path / "eval.csv").write_text(evals)
    return path


def test_compare_names_the_file_of_an_unknown_group_setting_and_of_an_eval_csv_that_is_no_file(tmp_path):
    run = _run_dir(tmp_path / "run")
    rc, lines, text = shoal("compare", str(run), "--by", "nope", "--out", str(tmp_path / "out"))
    assert rc == 2 and lines == [
        f"shoal: error: --by 'nope': no such setting in {run / 'config.json'} (a dqn run); "
        "one of agent, env_id, lr, preset, seed"
    ], text
    other = _run_dir(tmp_path / "other", evals=None)
    (other / "eval.csv").mkdir()
    rc, lines, text = shoal("compare", str(run), str(other), "--out", str(tmp_path / "out"))
    assert rc == 2 and lines == [f"shoal: error: {other / 'eval.csv'} is not a file"], text


@pytest.mark.parametrize(
    "state, field",
    [
        ("[]", "the state"),
        ('{"backend": "mlflow", "rows": 5}', "rows"),
        ('{"backend": "mlflow", "rows": {"train": "x"}}', "rows"),
        ('{"backend": "mlflow", "rows": {"train": -3}}', "rows"),
        ('{"backend": "mlflow", "videos": 5}', "videos"),
        ('{"backend": "mlflow", "run_id": 7}', "run_id"),
    ],
)
def test_a_tracking_json_not_as_shoal_writes_it_is_one_error_naming_the_file_and_the_field(tmp_path, state, field):
    (tmp_path / "tracking.json").write_text(state)
    with pytest.raises(ValueError) as refused:
        RunTracker("mlflow", str(tmp_path), resume=True)
    assert str(refused.value).startswith(f"{tmp_path / 'tracking.json'}: {field} is not as Shoal writes it")


def test_the_refusal_after_rm_lock_names_the_owners_pid(tmp_path):
    run_dir = tmp_path / "run"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from shoal.launch.experiments.run_directory.directory import "
            f"RunDirectory; RunDirectory({str(run_dir)!r}).lock(); print('locked', flush=True); "
            "sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        os.remove(run_dir / ".lock")
        with pytest.raises(ValueError) as refused:
            RunDirectory(str(run_dir)).lock()
        assert f"is in use by another run (pid {holder.pid})" in str(refused.value)
    finally:
        holder.communicate("")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("value, shown", [("float('nan')", "\"float('nan')\""), ("1e999", "inf"), ("nan", "'nan'")])
def test_an_env_arg_that_is_not_a_finite_number_is_refused_before_the_run_starts(tmp_path, value, shown):
    run_dir = tmp_path / "run"
    rc, lines, text = shoal(
        "train",
        "--agent",
        "sac",
        "--env",
        "Pendulum-v1",
        "--env-arg",
        f"g={value}",
        "--run-dir",
        str(run_dir),
        "--quiet",
    )
    assert rc == 2 and lines == [
        f"shoal: error: Pendulum-v1's argument g is a number (default 10.0); --env-arg g={shown} is not a finite number"
    ], text
    assert not run_dir.exists()


def test_scale_and_status_against_an_ended_run_say_so_at_once(tmp_path):
    program = Program("ending")
    program.add_node(ServiceNode(Counter), label="counter")
    run = launch(program, "inprocess", run_dir=str(tmp_path))
    try:
        serve_control(run, str(tmp_path), {})
        assert shoal("status", str(tmp_path))[0] == 0
    finally:
        run.stop()
    rc, lines, text = shoal("status", str(tmp_path))  # (the program removed its control files)
    assert rc == 2 and lines == [
        f"shoal: error: {str(tmp_path)!r} is not the run directory of a running "
        "distributed program (no control.json in it)"
    ], text
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (tmp_path / "control.json").write_text(
        json.dumps({"address": "127.0.0.1:1", "program": "dqn", "pid": int(ended.stdout)})
    )  # (killed: its files stay)
    (tmp_path / "control.token").write_text("token")
    started = time.monotonic()
    for command in (("status",), ("scale", "--actors", "2")):
        rc, lines, text = shoal(command[0], str(tmp_path), *command[1:])
        assert rc == 2 and lines == [
            f"shoal: error: the program of {str(tmp_path)!r} has ended (its process, pid {int(ended.stdout)}, is gone)"
        ], text
    assert time.monotonic() - started < 5  # (it waited 10 s for an answer, twice)


@pytest.mark.e2e
@pytest.mark.timeout(600)
def test_a_distributed_nan_loss_puts_the_update_and_its_batch_in_the_drivers_line(tmp_path):
    run_dir = tmp_path / "run"
    proc = run_shoal(
        "train",
        "--agent",
        "dqn",
        "--env",
        "tests.faults.faulty_envs:HugeRewards-v0",
        "--env-arg",
        "reward=1e38",
        "--num-envs",
        "8",
        "--set",
        "min_replay_size=256",
        "--launcher",
        "processes",
        "--num-actors",
        "1",
        "--run-dir",
        str(run_dir),
        "--quiet",
        timeout=500,
    )
    assert proc.returncode == 1, proc.stderr[-3000:]
    [line] = errors(proc.stderr)
    assert line.startswith("shoal: error: program 'dqn' failed: learner failed: FloatingPointError: learner update ")
    assert "produced non-finite {'loss'" in line and "its batch: " in line and "reward: 1e+38/" in line, line
    assert line.endswith(f"(see {run_dir / 'logs' / 'learner.log'})"), line


@pytest.mark.e2e
@pytest.mark.timeout(600)
def test_an_actor_whose_env_is_not_the_runs_fails_once_in_one_line_naming_both_specs(tmp_path):
    run_dir = tmp_path / "run"
    proc = run_shoal(
        "train",
        "--agent",
        "dqn",
        "--env",
        "cartpole",
        "--env-factory",
        "tests.faults.faulty_envs:cartpole_per_process",
        "--num-envs",
        "4",
        "--launcher",
        "processes",
        "--num-actors",
        "1",
        "--run-dir",
        str(run_dir),
        "--quiet",
        timeout=500,
    )
    assert proc.returncode == 1, proc.stderr[-3000:]
    [line] = errors(proc.stderr)
    assert line == (
        "shoal: error: program 'dqn' failed: actor_0 failed: SpecMismatch: actor_0's env has observations "
        "float32[5], 2 actions, 4 envs; the run's (read by the driver) has observations float32[4], 2 actions, "
        "4 envs: the env (or its factory) must build the same env in every process "
        f"(see {run_dir / 'logs' / 'actor_0.log'})"
    ), line
    assert "[launcher] actor_0 exited with 1; restart" not in proc.stderr  # (no restart builds another env)
    assert "ScopeParamShapeError" not in (run_dir / "logs" / "actor_0.log").read_text()
