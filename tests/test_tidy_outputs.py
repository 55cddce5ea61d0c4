"""What a run and the commands around it leave behind: node logs that start with the node's own
lines (no interpreter warning), default run directory names a filesystem and a shell take as
they are, ``shoal compare``'s default output under the git-ignored ``runs/``, examples that
clean up after themselves, and docs commands that end by themselves (a step budget or a target)."""

import contextlib
import io
import json
import os
import re
import subprocess
import sys

import pytest

from shoal.launch import FunctionNode, Program, launch
from shoal.launch.experiments.cli.main import main
from shoal.launch.experiments.run_directory.config_record import flat_record

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.e2e  # (a process per node)
@pytest.mark.timeout(120)
def test_a_node_log_starts_with_no_runpy_warning(tmp_path):
    """``python -m shoal.launch.programs.worker`` ran a module its package had already imported
    (through ``local.py``), and runpy warned about it at the top of every node's log."""
    program = Program("quiet")
    program.add_node(FunctionNode(sum, [1, 2]), label="adder")
    result = launch(program, "processes", run_dir=str(tmp_path)).wait(timeout_s=90)
    assert result["adder"] == 3
    with open(tmp_path / "logs" / "adder.log", encoding="utf-8") as f:
        log = f.read()
    assert "RuntimeWarning" not in log and "runpy" not in log, log


def test_the_worker_module_is_not_imported_by_its_package():
    """The cause, in a fresh interpreter: importing the program layer leaves the worker module
    unimported, so ``-m`` runs it once (warnings made errors: runpy's would fail the start)."""
    code = (
        "import sys, shoal.launch, shoal.launch.programs.local; "
        "assert 'shoal.launch.programs.worker' not in sys.modules, 'imported'"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    proc = subprocess.run(
        [sys.executable, "-W", "error::RuntimeWarning", "-m", "shoal.launch.programs.worker"],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert "RuntimeWarning" not in proc.stderr, proc.stderr[-2000:]


def train_dry_run(*args: str) -> dict:
    """``shoal train ARGS --dry-run`` in this process: its first stdout line (the resolved config)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(["train", *args, "--dry-run"])
    assert rc == 0, err.getvalue()
    return flat_record(json.loads(out.getvalue().splitlines()[0]))  # (read by flat name)


@pytest.mark.parametrize("env", ["tests.user_envs:SlowCartPole-v0", "shoal/CartPoleNoVelocity-v1"])
def test_the_default_run_directory_is_one_plain_folder_name(env):
    """(``--env module:EnvId`` gave ``runs/dqn-module:EnvId-s0-...``, a ``:`` that Windows, rsync
    and ``scp`` take for something else; ``shoal/...`` made a folder ``runs/dqn-shoal/``.)"""
    run_dir = train_dry_run("--agent", "dqn", "--env", env)["run_dir"]
    parent, name = os.path.split(run_dir)
    assert parent == "runs", run_dir
    assert re.fullmatch(r"dqn-[A-Za-z0-9._-]+-s0-\d{8}-\d{6}", name), run_dir
    assert "CartPole" in name, run_dir


def fake_run(path, seed: int, final: float) -> None:
    """A run directory as ``shoal compare`` reads it: ``config.json`` and ``eval.csv``."""
    os.makedirs(path)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(
            {
                "agent": "dqn",
                "env_id": "CartPole-v1",
                "seed": seed,
                "preset": "classic",
                "resolved_target_return": 475.0,
                "agent_config": {},
            },
            f,
        )
    with open(os.path.join(path, "eval.csv"), "w") as f:
        f.write(f"env_steps,wall_s,eval_return\n1000,1.0,20.0\n2000,2.0,{final}\n")


def test_compare_writes_under_the_ignored_runs_folder_and_reads_runs_star_again(tmp_path, monkeypatch, capsys):
    """(Its default ``--out`` was ``./compare``: an untracked folder in the repository.) The
    README's ``shoal compare runs/*`` works twice: its own output, ``runs/compare``, is not an input."""
    monkeypatch.chdir(tmp_path)
    for seed, final in enumerate([100.0, 300.0, 500.0]):
        fake_run(os.path.join("runs", f"dqn-{seed}"), seed, final)
    for _ in range(2):
        run_dirs = sorted(os.path.join("runs", name) for name in os.listdir("runs"))
        assert main(["compare", *run_dirs, "--bootstrap-samples", "20"]) == 0, capsys.readouterr().err
        assert "| dqn | CartPole-v1 | 3 |" in capsys.readouterr().out
    assert sorted(os.listdir(tmp_path)) == ["runs"]
    assert {"table.md", "summary.json"} <= set(os.listdir(os.path.join("runs", "compare")))
    with open(os.path.join(ROOT, ".gitignore"), encoding="utf-8") as f:
        assert "runs/" in f.read().split()


@pytest.mark.e2e  # (a program of processes)
@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "example, args", [("mapreduce.py", ["--lines", "300"]), ("parameter_server.py", ["--workers", "2"])]
)
def test_an_example_leaves_no_folder_in_the_temp_dir(example, args, tmp_path):
    """(Each launched its program with no run directory: ``launch`` made ``/tmp/shoal-<name>-*``
    for the node logs and address book, and nothing removed it.)"""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, "examples", example), *args],
        cwd=tmp_path,
        env=dict(os.environ, TMPDIR=str(tmp)),
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "ended: coordinator finished" in proc.stdout
    assert os.listdir(tmp) == [] and sorted(os.listdir(tmp_path)) == ["tmp"], (os.listdir(tmp), os.listdir(tmp_path))
