"""Everything a compiled-loop run (``--launcher anakin``) has, as a replay-path run has it: one
small run made once (compiled once) with a callback that sees each evaluation and ends it, then
``shoal evaluate`` (the run's own evaluation back, exactly, for its seed), ``shoal export`` (its
actions are ``load_policy``'s on recorded observations; ONNX where the extra is installed),
``shoal status``, ``shoal compare``, ``shoal record``, and ``--track mlflow``.

Needs gymnax (installed ``--no-deps``; docs/anakin.md): skips without it."""

import csv
import json
import os
import shutil

import numpy as np
import pytest

pytest.importorskip("gymnax", reason="gymnax is installed --no-deps (docs/anakin.md)")
pytestmark = pytest.mark.e2e  # (a compiled run made and read back by the command line: ~5 s)

import jax  # noqa: E402 -- (after the skip)

from shoal.launch import load_policy  # noqa: E402
from shoal.launch.experiments.anakin import run_anakin  # noqa: E402
from shoal.launch.experiments.anakin.evaluation import EVAL_SEED_OFFSET  # noqa: E402
from shoal.launch.experiments.callbacks import Callback  # noqa: E402
from shoal.launch.experiments.cli.main import main  # noqa: E402
from shoal.launch.experiments.config import experiment_config  # noqa: E402
from tests.shoal_cli import run_shoal  # noqa: E402

SEED, EVAL_EPISODES = 3, 10


class Recorder(Callback):
    """Keeps every evaluation and the result; ``stop_at``: ends the run at that evaluation."""

    def __init__(self, stop_at=None):
        self.evaluations, self.results, self.stop_at = [], [], stop_at

    def on_evaluation(self, evaluation):
        self.evaluations.append(evaluation)
        return self.stop_at is not None and evaluation.num_evals >= self.stop_at

    def on_end(self, result):
        self.results.append(result)


def config(run_dir, seed=SEED, max_env_steps=4096, **fields):
    """PPO on gymnax's CartPole: dispatches of one iteration (16 envs x 32 steps), an evaluation after each."""
    return experiment_config(
        "ppo",
        "gymnax:CartPole-v1",
        seed=seed,
        max_env_steps=max_env_steps,
        eval_every=512,
        eval_episodes=EVAL_EPISODES,
        target_return=1e9,
        run_dir=str(run_dir),
        progress=False,
        **fields,
    )


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """``(run directory, result, its Recorder)`` of one small run that its callback ends at its
    fourth evaluation, half way through its budget (the suite's compilation cache on)."""
    from shoal.launch.experiments.compilation_cache import enable_compilation_cache

    enable_compilation_cache()
    run_dir = tmp_path_factory.mktemp("anakin") / "run"
    recorder = Recorder(stop_at=4)
    result = run_anakin(config(run_dir).replace(callbacks=[recorder]))
    return run_dir, result, recorder


@pytest.fixture(scope="module")
def loaded(run):
    """``(load_policy of the run, observations it met on the run's env through gymnasium's wrapper)``."""
    policy = load_policy(str(run[0]))
    env = policy.config.make_env(8, 0, evaluation=True)
    observation, _ = env.reset(seed=0)
    seen = []
    for _ in range(32):
        seen.append(observation)
        observation, *_ = env.step(policy(observation))
    env.close()
    return policy, np.concatenate(seen)


def rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def cli(capsys, *args):
    """``shoal ARGS`` in this process (the CLI's code, without a process start): (status, stdout, stderr)."""
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_a_callback_sees_each_evaluation_and_the_end_and_ends_the_run(run):
    run_dir, result, recorder = run
    evals = rows(run_dir / "eval.csv")
    assert len(recorder.evaluations) == len(evals) == result["num_evals"] == 4
    assert result["stopped_by"] == "Recorder" and result["env_steps"] == 2048 and not result["solved"]
    for evaluation, row in zip(recorder.evaluations, evals):
        assert evaluation.env_steps == int(row["env_steps"]) and evaluation.params_version == int(row["params_version"])
        assert evaluation.mean_return == pytest.approx(float(row["eval_return"]))
        assert len(evaluation.returns) == EVAL_EPISODES and evaluation.run_dir == str(run_dir)
        assert isinstance(jax.tree_util.tree_leaves(evaluation.params)[0], np.ndarray)  # (host arrays)
    assert [e.num_evals for e in recorder.evaluations] == [1, 2, 3, 4]
    assert recorder.results == [{k: v for k, v in result.items() if k != "process_s"}]


def test_shoal_evaluate_plays_the_runs_own_last_evaluation_again(run, capsys):
    run_dir, result, _ = run
    last = rows(run_dir / "eval.csv")[-1]  # (evaluation k = num_evals - 1 ran on the params the end checkpoint holds)
    seed = SEED + EVAL_SEED_OFFSET + 7919 * (result["num_evals"] - 1)
    code, out, err = cli(capsys, "evaluate", str(run_dir), "--episodes", str(EVAL_EPISODES), "--seed", str(seed))
    assert code == 0, err
    evaluated = json.loads(out)
    assert evaluated["checkpoint"] == result["env_steps"] and evaluated["agent"] == "ppo"
    assert np.float32(evaluated["return"]["mean"]) == np.float32(last["eval_return"])
    assert evaluated["return"]["min"] == float(last["eval_return_min"])
    assert evaluated["return"]["max"] == float(last["eval_return_max"])
    assert evaluated["length"]["mean"] == evaluated["return"]["mean"]  # (CartPole: a reward of 1 a step)


def test_a_longer_evaluation_plays_rounds_each_from_its_first_episodes_key(run):
    from shoal.launch.experiments.anakin.evaluation import evaluate_compiled

    policy = load_policy(str(run[0]))
    rounds = []
    returns, lengths = evaluate_compiled(policy, 10, 7, 4, lambda done, steps: rounds.append((done, steps)))
    assert [done for done, _ in rounds] == [4, 8, 10] and sum(steps for _, steps in rounds) == lengths.sum()
    alone, _ = evaluate_compiled(policy, 4, 7 + 8, 4)  # (the last round as an evaluation of its own from seed + 8)
    np.testing.assert_array_equal(returns[8:], alone[:2])


def test_an_exported_policy_acts_as_load_policy_on_recorded_observations(run, loaded, tmp_path, capsys):
    from jax import export

    run_dir, result, _ = run
    policy, observations = loaded
    assert policy.anakin and policy.checkpoint == result["env_steps"]
    out = tmp_path / "policy.jax"
    code, printed, err = cli(capsys, "export", str(run_dir), "--out", str(out))
    assert code == 0, err
    assert json.loads(printed)["env"] == "gymnax:CartPole-v1"
    act = export.deserialize(bytearray(out.read_bytes()))
    exported = np.asarray(act.call(observations))
    assert exported.shape == (len(observations),)
    np.testing.assert_array_equal(exported, policy(observations))
    assert len(set(exported.tolist())) == 2  # (both actions: the comparison means something)


@pytest.mark.e2e  # (jax2onnx's conversion: seconds)
def test_an_onnx_export_acts_as_load_policy(run, loaded, tmp_path, capsys):
    pytest.importorskip("jax2onnx", reason="the onnx extra (Python 3.12+)")
    ort = pytest.importorskip("onnxruntime", reason="the onnx extra (Python 3.12+)")
    run_dir, _, _ = run
    policy, observations = loaded
    out = tmp_path / "policy.onnx"
    code, _, err = cli(capsys, "export", str(run_dir), "--out", str(out), "--format", "onnx")
    assert code == 0, err
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    (actions,) = session.run(["action"], {"observation": observations.astype(np.float32)})
    np.testing.assert_array_equal(actions, policy(observations))


def test_shoal_status_reads_an_anakin_run(run, capsys):
    run_dir, result, _ = run
    code, out, err = cli(capsys, "status", str(run_dir))
    assert code == 0, err
    assert "anakin: envs, policy and update in one compiled loop" in out and "stopped by Recorder" in out
    assert f"env steps: {result['env_steps']:,} of 4,096" in out
    assert f"last checkpoint: {result['env_steps']:,} env steps" in out


def test_shoal_compare_reads_anakin_runs(run, tmp_path, capsys):
    run_dir, result, _ = run
    copy = tmp_path / "copy"  # (a second run's files: compare reads result.json and eval.csv)
    shutil.copytree(run_dir, copy, ignore=shutil.ignore_patterns("checkpoints", "tb"))
    code, out, err = cli(capsys, "compare", str(run_dir), str(copy), "--out", str(tmp_path / "compared"))
    assert code == 0, err
    assert "| ppo | gymnax:CartPole-v1 | 2 |" in out
    assert (tmp_path / "compared" / "summary.json").is_file()


@pytest.mark.e2e  # (a second compilation where the cache does not serve it: JAX 0.4.34's)
def test_resume_experiment_continues_an_anakin_run_in_the_compiled_loop_with_its_callbacks(run, tmp_path):
    from shoal.launch import resume_experiment

    run_dir, first, _ = run
    copy = tmp_path / "copy"  # (the fixture's run stays as it ended)
    shutil.copytree(run_dir, copy)
    again = Recorder()
    result = resume_experiment(str(copy), max_env_steps=3072, callbacks=[again])
    assert result["launcher"] == "anakin" and result["resumed_from"] == first["env_steps"] == 2048
    assert result["env_steps"] == 3072 and "stopped_by" not in result
    assert [e.num_evals for e in again.evaluations] == [5, 6] and len(again.results) == 1
    assert [int(r["env_steps"]) for r in rows(copy / "eval.csv")] == [512 * i for i in range(1, 7)]


@pytest.mark.e2e  # (minari's import)
def test_shoal_record_writes_an_anakin_runs_episodes(run, tmp_path, capsys):
    pytest.importorskip("minari", reason="the minari extra")
    run_dir, _, _ = run
    code, out, err = cli(capsys, "record", str(run_dir), "--out", str(tmp_path / "data"), "--episodes", "3")
    assert code == 0, err
    recorded = json.loads(out)
    assert recorded["episodes"] == 3 and recorded["steps"] > 3 and recorded["env"] == "gymnax:CartPole-v1"


def test_video_every_with_anakin_is_one_line_exit_2_nothing_written(tmp_path, capsys):
    code, out, err = cli(
        capsys,
        "train",
        "--agent",
        "ppo",
        "--env",
        "gymnax:CartPole-v1",
        "--video-every",
        "1",
        "--run-dir",
        str(tmp_path / "run"),
    )
    assert code == 2 and not out
    assert err.strip().splitlines() == [
        "shoal: error: --launcher anakin records no evaluation videos (its envs run compiled, without a "
        "renderer): drop --video-every (got 1)"
    ]
    assert not os.path.exists(tmp_path / "run")


@pytest.mark.e2e  # (a process of its own: MLflow's import and store)
def test_track_mlflow_sends_an_anakin_runs_logs_and_result(tmp_path):
    from mlflow import MlflowClient

    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    args = ["--agent", "ppo", "--env", "gymnax:CartPole-v1", "--max-env-steps", "1024", "--eval-every", "512"]
    done = run_shoal(
        "train", *args, "--run-dir", "run", "--track", "mlflow", "--quiet", cwd=tmp_path, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["launcher"] == "anakin"
    run_id = json.loads((tmp_path / "run" / "tracking.json").read_text())["run_id"]
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    tracked = client.get_run(run_id)
    assert tracked.info.status == "FINISHED" and tracked.data.params["agent"] == "ppo"
    history = client.get_metric_history(run_id, "eval/eval_return")
    assert [(m.step, m.value) for m in history] == [
        (int(r["env_steps"]), pytest.approx(float(r["eval_return"]))) for r in rows(tmp_path / "run" / "eval.csv")
    ]
    assert tracked.data.metrics["result/final_eval_return"] == pytest.approx(result["final_eval_return"])
    assert len(client.get_metric_history(run_id, "train/steps_per_s")) == 2


@pytest.mark.e2e  # (it trains with actors and replay)
def test_a_jax_env_run_with_replay_resumes_with_replay_and_an_anakin_run_in_the_compiled_loop(run, tmp_path, capsys):
    from shoal.launch.experiments.runner import run_experiment

    replayed = tmp_path / "replayed"
    first = run_experiment(config(replayed, max_env_steps=1024, num_envs=4))
    assert "launcher" not in first
    code, out, err = cli(capsys, "train", "--resume", str(replayed), "--max-env-steps", "1536", "--quiet")
    assert code == 0, err
    again = json.loads(out.strip().splitlines()[-1])
    assert (
        "launcher" not in again
        and again["env_steps"] >= 1536
        and again["resumed_from"]["env_steps"] == first["env_steps"]
    )
    copy = tmp_path / "anakin"
    shutil.copytree(run[0], copy)
    code, out, err = cli(capsys, "train", "--resume", str(copy), "--max-env-steps", "2560", "--quiet")
    assert code == 0, err
    resumed = json.loads(out.strip().splitlines()[-1])
    assert resumed["launcher"] == "anakin" and resumed["env_steps"] == 2560
