"""SAC in the compiled loop (``--agent sac --launcher anakin``): the schedule that keeps SAC's
replay ratio, one compiled iteration's shapes, and (with gymnax) a run that learns gymnax's
Pendulum, is the same twice, resumes exactly, calls SAC's own loss, is read back by
``load_policy``/``shoal evaluate``, and refuses what it does not run in one line."""

import csv
import importlib.util
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from shoal.agents.sac.config import SACConfig
from shoal.launch.experiments.anakin.off_policy import steps_and_updates

needs_gymnax = pytest.mark.skipif(
    importlib.util.find_spec("gymnax") is None, reason="gymnax is installed --no-deps, outside .[dev] (docs/anakin.md)"
)


def rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize(
    "num_envs, batch_size, sgd_steps, ratio, expected",
    [
        (16, 256, 16, 256.0, (1, 16)),  # SAC's defaults: one SGD step of 256 per env step
        (4, 256, 16, 256.0, (4, 16)),  # fewer envs: more vector steps per update
        (64, 256, 16, 256.0, (1, 64)),  # more envs than SGD steps: more SGD steps per vector step
        (3, 256, 16, 256.0, (6, 18)),  # a count that does not divide: still exact
        (16, 128, 8, 64.0, (1, 8)),  # a lower replay ratio
    ],
)
def test_the_schedule_keeps_sacs_replay_ratio(num_envs, batch_size, sgd_steps, ratio, expected):
    """``(k vector steps, u SGD steps)`` per iteration, trained-on per inserted = samples_per_insert."""
    config = SACConfig(batch_size=batch_size, sgd_steps_per_update=sgd_steps, samples_per_insert=ratio)
    k, u = steps_and_updates(config, num_envs)
    assert (k, u) == expected
    assert u * batch_size / (k * num_envs) == ratio


def config_of(seed=0, agent_settings=None, **flat):
    """SAC on gymnax's Pendulum for a few dispatches that stop by budget, not by a target."""
    from shoal.launch.experiments.config import experiment_config

    flat = {"max_env_steps": 3072, "eval_every": 1024, "target_return": 1e9, **flat}
    return experiment_config(
        "sac", "gymnax:Pendulum-v1", agent_settings=agent_settings, seed=seed, progress=False, **flat
    )


@needs_gymnax
@pytest.mark.e2e  # (compiles SAC's whole iteration: ~19 s cold on 2 cores)
def test_one_compiled_iteration_writes_the_ring_and_runs_sacs_update():
    """A small SAC (batch 8, 2 SGD steps, 4 envs, learning from 4 transitions): one iteration
    writes its k vector steps into the ring ([envs, rows, ...], the Box action float32) and
    runs one update of u SGD steps (k = 1 and u = 2 keep the ratio of 4), with SAC's metrics."""
    from shoal.envs.jax_envs import make_jax_env
    from shoal.envs.jax_vector import JaxVectorEnv
    from shoal.launch.experiments.anakin import sac
    from shoal.launch.experiments.anakin.runner import make_dispatch, place
    from shoal.learners.placement import Placement

    settings = {"batch_size": 8, "sgd_steps_per_update": 2, "samples_per_insert": 4.0, "min_replay_size": 4}
    settings |= {"max_replay_size": 64, "hidden_sizes": (8,)}
    config = config_of(agent_settings=settings, num_envs=4)
    env, params = make_jax_env(config.env.id, config.env.args)
    venv = JaxVectorEnv(env, config.env.num_envs, params)
    loop = sac.make_loop(
        config.builder, config.make_networks(venv.spec), venv, 1, *jax.random.split(jax.random.PRNGKey(0), 3)
    )
    assert (loop.steps_per_iteration, loop.sgd_steps_per_update) == (4, 2)  # k = 1 vector step, u = 2 SGD steps
    data = loop.initial.buffer.data
    assert data["action"].shape == (4, 16, 1) and data["action"].dtype == jnp.float32
    assert data["observation"].shape == (4, 16, 3)
    placement = Placement(jax.local_devices()[:1])
    carry, metrics = make_dispatch(loop.iteration, placement, loop.specs)(
        place(loop.initial, placement, loop.specs), jnp.int32(1), jnp.bool_(True)
    )
    assert int(carry.buffer.size) == 1 and int(carry.updates) == 1 and int(carry.env_steps) == 4
    assert {"critic_loss", "policy_loss", "alpha_loss", "alpha", "entropy", "q_mean"} <= set(metrics)
    assert all(np.isfinite(float(v)) for v in metrics.values())
    moved = jax.tree_util.tree_map(lambda a, b: not np.allclose(a, b), loop.initial.train.params, carry.train.params)
    assert any(jax.tree_util.tree_leaves(moved))  # (the policy took its Adam steps)


@needs_gymnax
@pytest.mark.e2e  # (a training run, ~15-30 s on 2 cores)
def test_anakin_sac_learns_gymnax_pendulum_and_its_run_is_read_back(tmp_path):
    """Greedy return above -400 (measured: -183 at 8,000 env steps for seed 0, -120 at 20,000)
    within 16,000 env steps; the replay ratio is SAC's (256: one SGD step of 256 per env step);
    ``load_policy`` and the compiled evaluation give the run's last evaluation back exactly."""
    from shoal.launch import load_policy
    from shoal.launch.experiments.anakin import run_anakin
    from shoal.launch.experiments.anakin.evaluation import EVAL_SEED_OFFSET, evaluate_compiled

    run = tmp_path / "run"
    config = config_of(max_env_steps=16_000, eval_every=2000, target_return=-400, run_dir=str(run))
    result = run_anakin(config)
    assert result["solved"] and result["final_eval_return"] >= -400, result
    assert result["launcher"] == "anakin" and result["agent"] == "sac", result
    learner = rows(run / "learner.csv")
    assert {"critic_loss", "policy_loss", "alpha_loss", "alpha", "q_mean"} <= set(learner[-1])
    assert int(learner[-1]["learner_steps"]) == result["learner_steps"] > 0
    # (learning starts once the ring holds min_replay_size = 1,000 transitions: at the 63rd vector
    # step of 16, so the first 62 iterations only act; then 16 SGD steps per vector step)
    assert result["learner_steps"] == result["env_steps"] - 62 * 16, result
    policy = load_policy(str(run))
    assert policy.anakin and policy.checkpoint == result["env_steps"]
    last = len(rows(run / "eval.csv")) - 1
    returns, _ = evaluate_compiled(policy, 10, config.run.seed + EVAL_SEED_OFFSET + 7919 * last, 10)
    assert float(np.mean(returns)) == pytest.approx(result["final_eval_return"], rel=1e-5)


@needs_gymnax
@pytest.mark.e2e  # (three short training runs)
def test_a_seeded_anakin_sac_run_is_the_same_twice_and_calls_sacs_loss(tmp_path, monkeypatch):
    from shoal.agents.sac import learning
    from shoal.agents.sac.builder import SACBuilder
    from shoal.launch.experiments.anakin import run_anakin

    traced = []

    def counting_loss(*args):
        traced.append(args[3]["observation"].shape)
        return learning.sac_loss(*args)

    monkeypatch.setattr(SACBuilder, "loss", staticmethod(counting_loss))
    runs = [run_anakin(config_of(run_dir=str(tmp_path / f"run{i}"))) for i in range(2)]
    assert traced and traced[0] == (256, 3), traced  # (SAC's loss, on a batch of 256 per SGD step)
    same = ("env_steps", "learner_steps", "num_evals", "final_eval_return")
    assert {k: runs[0][k] for k in same} == {k: runs[1][k] for k in same}
    for name, columns in (("eval.csv", ["eval_return"]), ("learner.csv", ["critic_loss", "policy_loss", "alpha"])):
        first, second = (rows(tmp_path / f"run{i}" / name) for i in range(2))
        assert [[r[c] for c in columns] for r in first] == [[r[c] for c in columns] for r in second], name
    run_anakin(config_of(seed=1, run_dir=str(tmp_path / "seed1")))
    losses = [[r["critic_loss"] for r in rows(tmp_path / run / "learner.csv")] for run in ("run0", "seed1")]
    assert losses[0] != losses[1]


@needs_gymnax
@pytest.mark.e2e  # (three training runs, through `shoal train`'s code)
def test_a_resumed_anakin_sac_run_continues_exactly(tmp_path, capsys, monkeypatch):
    """Stopped at 2,048 env steps and resumed to 3,072 (the ring, SAC's state and the keys in the
    checkpoint), a run logs what the run that never stopped logs, row for row."""
    from shoal.launch.experiments.anakin import run_anakin
    from shoal.launch.experiments.cli.main import main

    monkeypatch.chdir(tmp_path)
    run_anakin(config_of(run_dir=str(tmp_path / "whole")))
    flags = ["--eval-every", "1024", "--target-return", "1e9", "--quiet"]
    first = ["train", "--agent", "sac", "--env", "gymnax:Pendulum-v1", "--max-env-steps", "2048", *flags]
    assert main([*first, "--run-dir", str(tmp_path / "parts")]) == 0
    assert main(["train", "--resume", str(tmp_path / "parts"), "--max-env-steps", "3072", "--quiet"]) == 0
    resumed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert resumed["resumed_from"] == 2048 and resumed["env_steps"] == 3072 and resumed["launcher"] == "anakin"
    columns = {
        "eval.csv": ["env_steps", "eval_return", "eval_return_min"],
        "learner.csv": ["learner_steps", "updates", "critic_loss", "policy_loss", "alpha_loss", "alpha"],
    }
    for name, names in columns.items():
        whole, parts = (rows(tmp_path / run / name) for run in ("whole", "parts"))
        assert len(whole) == 3 and [[r[c] for c in names] for r in parts] == [[r[c] for c in names] for r in whole]


@needs_gymnax
def test_what_anakin_sac_refuses_is_one_line(tmp_path, capsys, monkeypatch):
    """A discrete-action JAX env: SAC's own line, exit 2, nothing written."""
    from shoal.launch.experiments.cli.main import main

    monkeypatch.chdir(tmp_path)
    run_dir = tmp_path / "run"
    assert main(["train", "--agent", "sac", "--env", "gymnax:CartPole-v1", "--run-dir", str(run_dir)]) == 2
    captured = capsys.readouterr()
    errors = captured.err.strip().splitlines()
    assert len(errors) == 1 and errors[0].startswith("shoal: error:") and "continuous (Box)" in errors[0], errors
    assert captured.out == "" and not run_dir.exists()


def test_a_sac_batch_that_does_not_divide_over_the_devices_is_one_line():
    from shoal.launch.experiments.anakin import check_anakin

    config = config_of(agent_settings={"batch_size": 255})
    with pytest.raises(ValueError, match="SAC's batch_size 255 does not divide over the 2 local devices"):
        check_anakin(config, 2)
    check_anakin(config_of(), 2)  # (256 does)


@needs_gymnax
@pytest.mark.e2e  # (`shoal train` in a subprocess: two host devices are set before JAX starts)
def test_anakin_sac_splits_its_envs_and_ring_over_two_devices(tmp_path):
    """Each device steps half the envs into its half of the ring and draws half the batch; SAC's
    update averages the gradients over the two (``pmean``)."""
    import os

    from tests.shoal_cli import run_shoal

    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2")
    args = ["--agent", "sac", "--env", "gymnax:Pendulum-v1", "--max-env-steps", "2048", "--eval-every", "1024"]
    proc = run_shoal(
        "train", *args, "--target-return", "1e9", "--quiet", "--run-dir", str(tmp_path / "run"), timeout=300, env=env
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["devices"] == 2 and result["env_steps"] == 2048 and result["learner_steps"] > 0, result
    assert np.isfinite(float(rows(tmp_path / "run" / "learner.csv")[-1]["critic_loss"]))
