"""What hangs must not hold a run: a tracker at the run's end, a renderer, an env's step."""

import os
import socket
import sys
import threading
import time
import types

import numpy as np
import pytest

from shoal.launch.experiments import trackers
from shoal.launch.experiments.interrupts import StopRequest
from shoal.launch.experiments.tracking import RunTracker
from tests.faults.harness import SMALL, errors, shoal_main, start
from tests.shoal_cli import run_shoal


class _Hangs(trackers.Backend):
    """A backend whose ``start`` blocks until ``release`` is set (``entered`` says it began); the
    fixture then waits for the tracker's thread to end (a line printed after its test ended would
    land in the next test's output)."""

    entered = threading.Event()
    release = threading.Event()

    def start(self, run_dir, config, resume_id):
        self.entered.set()
        self.release.wait()

    def log(self, label, rows): ...
    def video(self, path, env_steps): ...
    def finish(self, result): ...
    def where(self):
        return "nowhere"


@pytest.fixture
def hanging_backend(monkeypatch):
    _Hangs.entered.clear()
    _Hangs.release.clear()
    monkeypatch.setitem(trackers.BACKENDS, "hangs", _Hangs)
    yield _Hangs
    _Hangs.release.set()
    for thread in threading.enumerate():  # (its "tracking to" line must land in this test's output)
        if thread.name == "shoal-tracking":
            thread.join(30)


def _warnings(text):
    return [line for line in text.splitlines() if line.startswith("shoal: warning: tracking")]


@pytest.mark.parametrize("stopped_before", [False, True], ids=["signal-while-waiting", "second-signal"])
def test_a_signal_ends_the_wait_for_a_hanging_tracker(tmp_path, capsys, hanging_backend, stopped_before):
    stop = StopRequest()
    if stopped_before:  # (the run was stopped by a first signal: a second one ends the wait)
        stop.set()
    tracker = RunTracker("hangs", str(tmp_path), resume=False, every_s=0).start()
    assert hanging_backend.entered.wait(30)
    closing = threading.Thread(target=tracker.close, args=({"env_steps": 0},), kwargs={"stop": stop, "timeout_s": 600})
    closing.start()
    (stop.hurry if stopped_before else stop).set()  # what the signal handler does (interrupts._Handler)
    closing.join(30)
    assert not closing.is_alive()
    warnings = _warnings(capsys.readouterr().err)
    assert warnings == [
        f"shoal: warning: tracking (hangs) left unfinished (the run was interrupted while it "
        f"waited); the run's logs are complete in {tmp_path}"
    ], warnings


def _closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # (closed once this returns: a connection is refused)


@pytest.mark.e2e  # (imports MLflow, ~2 s, and waits on its client)
def test_an_unreachable_mlflow_is_one_warning_in_seconds(tmp_path, capfd, monkeypatch):
    pytest.importorskip("mlflow")
    import mlflow  # noqa: F401 -- (imported here: its import's seconds are not the tracker's)

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{_closed_port()}")
    for name in trackers.MLFLOW_HTTP:  # (unset, and unset again after the test: the backend sets them)
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    tracker = RunTracker("mlflow", str(tmp_path), resume=False, every_s=0).start()
    began = time.monotonic()
    tracker.close({"env_steps": 0}, timeout_s=25)  # (MLflow's own retries took two minutes)
    assert time.monotonic() - began < 25
    err = capfd.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith("shoal: warning: tracking (mlflow) failed: MlflowException"), err


def test_wandb_sends_no_error_reports(tmp_path, monkeypatch):
    """W&B reports its errors to its own Sentry unless ``WANDB_ERROR_REPORTING`` is false: a
    user who did not ask for that is not reported."""
    seen = {}

    def init(**kwargs):
        seen["error_reporting"] = __import__("os").environ.get("WANDB_ERROR_REPORTING")
        return types.SimpleNamespace(id="run", define_metric=lambda *a, **k: None)

    monkeypatch.setitem(sys.modules, "wandb", types.SimpleNamespace(init=init, Settings=lambda **k: None))
    monkeypatch.setenv("WANDB_ERROR_REPORTING", "")
    monkeypatch.delenv("WANDB_ERROR_REPORTING")
    trackers.WandbBackend().start(str(tmp_path), {}, None)
    assert seen == {"error_reporting": "false"}

    monkeypatch.setenv("WANDB_ERROR_REPORTING", "true")  # (what the user sets is kept)
    trackers.WandbBackend().start(str(tmp_path), {}, None)
    assert seen == {"error_reporting": "true"}


@pytest.fixture
def release_hangs():
    """Lets the envs of ``hanging_envs`` that hang in this process go on once the test ends."""
    from tests.faults import hanging_envs

    hanging_envs.RELEASE.clear()
    yield
    hanging_envs.RELEASE.set()


@pytest.mark.e2e
def test_a_renderer_that_hangs_is_one_warning_and_the_run_goes_on(tmp_path, monkeypatch, release_hangs):
    monkeypatch.setenv("SHOAL_STEP_TIMEOUT_S", "1")
    run_dir = tmp_path / "run"
    rc, errors, text = shoal_main(
        "train",
        "--agent",
        "ppo",
        "--env",
        "tests.faults.hanging_envs:HangsInRender-v0",
        "--set",
        "rollout_length=64",
        "--num-envs",
        "4",
        "--max-env-steps",
        "512",
        "--eval-every",
        "256",
        "--eval-episodes",
        "1",
        "--target-return",
        "1e9",
        "--video-every",
        "1",
        "--run-dir",
        str(run_dir),
        "--quiet",
    )
    assert rc == 0 and not errors, text
    warnings = [line for line in text.splitlines() if line.startswith("shoal: warning:")]
    assert warnings == [
        "shoal: warning: no evaluation video (TimeoutError: the env gave no frame in 1 s (its render() "
        "or step() did not return; SHOAL_STEP_TIMEOUT_S); it is left where it hangs); no more will "
        "be tried"
    ], text
    assert not list(run_dir.glob("videos/*")) and (run_dir / "result.json").exists()


STUCK = (
    "the environment's step() (HangsInStep-v0) has not returned in 1 s, after {steps} env steps "
    "(SHOAL_STEP_TIMEOUT_S=1); a stuck environment: its process ends"
)


@pytest.mark.e2e
def test_a_step_that_hangs_stops_a_one_process_run_in_one_line(tmp_path):
    done = run_shoal(
        "train",
        *SMALL,
        "--env",
        "tests.faults.hanging_envs:HangsInStep-v0",
        "--run-dir",
        str(tmp_path / "run"),
        timeout=300,
        env={**os.environ, "SHOAL_STEP_TIMEOUT_S": "1"},
    )
    assert done.returncode == 1, done.stderr
    # (8 envs; the 50th step of each hangs: after 49 vector steps)
    assert errors(done.stderr) == ["shoal: error: the actor: " + STUCK.format(steps="392")], done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.e2e
def test_an_actor_whose_step_hangs_is_named_and_restarted(tmp_path):
    """In a distributed run the actor's process ends with the line (its log), its launcher
    restarts it (the program's stderr says so), and after its restarts the program fails
    naming it."""
    run_dir = tmp_path / "run"
    with start(
        run_dir,
        "--env",
        "tests.faults.hanging_envs:HangsInStep-v0",
        num_actors=1,
        env={**os.environ, "SHOAL_STEP_TIMEOUT_S": "1"},
    ) as proc:
        _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 1, stderr
    assert "[launcher] actor_0 exited with 1; restart 1/3" in stderr, stderr
    assert any(line.startswith("shoal: error:") and "actor_0" in line for line in stderr.splitlines()), stderr
    log = (run_dir / "logs" / "actor_0.log").read_text()
    assert "shoal: error: actor_0: " + STUCK.format(steps="392") in log, log


@pytest.mark.e2e  # (waits out the 1 s step bound by design)
def test_an_evaluation_whose_step_hangs_ends_in_one_line(monkeypatch, release_hangs):
    """The evaluator's episodes are watched as the actors' steps are (``actors.loops.evaluate``):
    a step past ``SHOAL_STEP_TIMEOUT_S`` is one line naming the evaluation, the env and the bound
    (the process then ends; here ``on_stall`` records it and lets the env go on)."""
    import gymnasium as gym

    from shoal.actors.loops import evaluate
    from tests.faults import hanging_envs

    class Random:
        def select_action(self, obs):
            return np.zeros(len(obs), np.int64), {}

        def end_episodes(self, ended):
            pass

    monkeypatch.setenv("SHOAL_STEP_TIMEOUT_S", "1")
    env = gym.vector.SyncVectorEnv([lambda: gym.make("tests.faults.hanging_envs:HangsInStep-v0", after=5)] * 2)
    stalls = []

    def on_stall(line):
        stalls.append(line)
        hanging_envs.RELEASE.set()

    returns = evaluate(env, Random(), seed=0, on_stall=on_stall)
    assert returns is not None and len(returns) == 2
    assert stalls == [
        "shoal: error: an evaluation: the environment's step() (HangsInStep-v0) has not returned in "
        "1 s, after 8 env steps of the evaluation (SHOAL_STEP_TIMEOUT_S=1); a stuck environment: "
        "its process ends"
    ], stalls
