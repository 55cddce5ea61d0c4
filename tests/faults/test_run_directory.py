"""The run directory is a trust boundary: nothing is written through a link planted in it, a
directory another user owns or anyone may write is refused, a node's definition is never
re-read from it, and its lock cannot be unlinked from under a live run."""

import json
import os
import pickle
import signal
import stat

import psutil
import pytest

from shoal.core.files import open_append, write_atomic
from shoal.core.loggers import CSVLogger
from shoal.launch.experiments.run_directory.directory import RunDirectory
from tests.faults.harness import SMALL, errors, node_pids, running, start
from tests.shoal_cli import run_shoal
from tests.waiting import wait_for


def train(run_dir, *args):
    return run_shoal(
        "train",
        *SMALL,
        "--launcher",
        "processes",
        "--num-actors",
        "1",
        "--max-env-steps",
        "2000",
        "--run-dir",
        str(run_dir),
        *args,
        timeout=300,
    )


def test_writes_replace_a_planted_link_and_never_write_through_it(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious")
    run = tmp_path / "run"
    run.mkdir()
    (run / "control.token").symlink_to(victim)
    os.umask(0o022)
    write_atomic(str(run / "control.token"), "secret", mode=0o600)
    assert victim.read_text() == "precious"
    assert not (run / "control.token").is_symlink() and (run / "control.token").read_text() == "secret"
    assert stat.S_IMODE((run / "control.token").stat().st_mode) == 0o600
    assert sorted(p.name for p in run.iterdir()) == ["control.token"]  # (no temp file left)

    (run / "counter.log").symlink_to(victim)
    with pytest.raises(OSError):
        open_append(str(run / "counter.log"))
    (run / "learner.csv").symlink_to(victim)
    with pytest.raises(OSError):
        CSVLogger(str(run), "learner")
    assert victim.read_text() == "precious"


def test_links_inside_wandbs_own_directory_pass_the_check_and_a_wandb_link_does_not(tmp_path):
    from shoal.core.files import check_run_directory

    run = tmp_path / "run"
    (run / "wandb" / "offline-run-1").mkdir(parents=True)
    (run / "wandb" / "latest-run").symlink_to(run / "wandb" / "offline-run-1")  # (as W&B makes it)
    check_run_directory(str(run))
    (run / "wandb" / "latest-run").unlink()
    (run / "wandb").rename(tmp_path / "elsewhere")
    (run / "wandb").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ValueError, match="wandb is a symbolic link"):
        check_run_directory(str(run))


@pytest.mark.e2e
def test_a_run_directory_holding_links_is_refused_before_anything_is_written(tmp_path):
    outside = {name: tmp_path / f"outside-{name}" for name in ("lock", "token", "log")}
    for path in outside.values():
        path.write_text("untouched")
    run_dir = tmp_path / "run"
    (run_dir / "logs").mkdir(parents=True)
    (run_dir / ".lock").symlink_to(outside["lock"])
    (run_dir / "control.token.tmp").symlink_to(outside["token"])
    (run_dir / "logs" / "counter.log").symlink_to(outside["log"])
    done = train(run_dir)
    assert done.returncode == 2, done.stderr[-3000:]
    assert len(errors(done.stderr)) == 1 and "symbolic link" in errors(done.stderr)[0], done.stderr[-3000:]
    assert all(path.read_text() == "untouched" for path in outside.values())
    assert sorted(p.name for p in run_dir.iterdir()) == [".lock", "control.token.tmp", "logs"]


@pytest.mark.e2e
def test_a_run_directory_others_may_write_or_own_is_refused_and_a_group_writable_one_warned(tmp_path, capsys):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    run_dir.chmod(0o777)
    with pytest.raises(ValueError, match="may be written by anyone"):
        RunDirectory(str(run_dir)).lock()
    run_dir.chmod(0o775)
    RunDirectory(str(run_dir)).lock().unlock()
    assert "may be written by its group" in capsys.readouterr().err
    run_dir.chmod(0o755)
    (run_dir / "logs").mkdir()
    (run_dir / "logs").chmod(0o777)
    with pytest.raises(ValueError, match="logs may be written by anyone"):
        RunDirectory(str(run_dir)).lock()
    (run_dir / "logs").chmod(0o755)
    if os.geteuid() != 0:
        return  # (only root can give a directory to another user)
    os.chown(run_dir, 65534, 65534)
    done = train(run_dir)
    assert done.returncode == 2 and len(errors(done.stderr)) == 1, done.stderr[-3000:]
    assert "belongs to" in errors(done.stderr)[0] and "not to you" in errors(done.stderr)[0]
    assert sorted(p.name for p in run_dir.iterdir()) == [".lock", "logs"]  # (.lock of the unlock above)


class _Planted:
    """A pickle that, loaded, leaves a mark (what a swapped node definition would run)."""

    def __init__(self, mark):
        self.mark = mark

    def __reduce__(self):
        return (os.system, (f"touch {self.mark}",))


@pytest.mark.e2e
@pytest.mark.timeout(400)
def test_a_live_run_reads_no_node_file_and_keeps_its_lock_when_lock_is_deleted(tmp_path):
    run_dir, mark = tmp_path / "run", tmp_path / "code-ran"
    proc = start(
        run_dir,
        "--max-env-steps",
        str(10**8),
        "--eval-every",
        str(10**8),
        "--checkpoint-every",
        "1000000",
        num_actors=1,
    )
    try:
        wait_for(
            lambda: running(run_dir, "replay", "counter", "learner", "actor_0", "evaluator"), 240, "every node to serve"
        )
        assert not list(run_dir.rglob("*.pkl"))  # node definitions are not on disk at all
        # A pickle planted where the launcher used to keep actor_0's definition, then actor_0 killed:
        # the restarted actor gets its definition from the launcher's memory.
        (run_dir / "nodes").mkdir()
        (run_dir / "nodes" / "actor_0.pkl").write_bytes(pickle.dumps(_Planted(mark)))
        victim = node_pids(proc.pid)["actor_0"]
        published = _inode(run_dir / "addresses" / "actor_0")  # (each publication writes a new file)
        os.kill(victim, signal.SIGKILL)
        new = wait_for(
            lambda: node_pids(proc.pid).get("actor_0") not in (None, victim) and node_pids(proc.pid)["actor_0"],
            120,
            "actor_0 to restart",
        )
        # (the line a node prints once it has its definition)
        wait_for(
            lambda: f"started (pid {new}," in (run_dir / "logs" / "actor_0.log").read_text(),
            120,
            "the restarted actor_0 to load its definition",
        )
        assert not mark.exists()
        wait_for(
            lambda: _inode(run_dir / "addresses" / "actor_0") not in (None, published),
            120,
            "the restarted actor_0 to publish its address",
        )

        # .lock deleted under the live run: a second run on the directory is still refused.
        config = (run_dir / "config.json").read_text()
        addresses = {p.name: p.read_text() for p in (run_dir / "addresses").iterdir()}
        (run_dir / ".lock").unlink()
        second = start(run_dir, "--max-env-steps", "1000")
        out, err = second.communicate(timeout=180)
        assert second.returncode == 2, err[-2000:]
        assert len(errors(err)) == 1 and "in use by another run" in errors(err)[0], err[-2000:]
        assert (run_dir / "config.json").read_text() == config
        assert {p.name: p.read_text() for p in (run_dir / "addresses").iterdir()} == addresses

        proc.send_signal(signal.SIGTERM)  # the live run still ends with its checkpoint and its result
        out, err = proc.communicate(timeout=180)
    finally:
        proc.kill()
    assert proc.returncode == 143, err[-3000:]
    assert json.loads(out.strip().splitlines()[-1])["terminated"] == "SIGTERM"
    assert (run_dir / "checkpoints" / "run.json").exists() or (run_dir / "run.json").exists()
    assert not mark.exists()
    assert not [
        p
        for p in psutil.process_iter(["cmdline"])
        if p.info["cmdline"] and any(str(run_dir) in part for part in p.info["cmdline"])
    ]


def _inode(path):
    try:
        return path.stat().st_ino
    except FileNotFoundError:
        return None
