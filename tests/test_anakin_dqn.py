"""DQN in the compiled loop (``--agent dqn --launcher anakin``): the device buffer's ring, uniform
draw and minimum size, the n-step transitions it hands DQN's update, and (with gymnax) a run that
solves gymnax's CartPole, is the same twice, resumes exactly, calls DQN's own loss, and refuses
what it does not run in one line."""

import csv
import importlib.util
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from shoal.launch.experiments.anakin import buffer as ring
from shoal.launch.experiments.anakin.dqn import n_step_transitions

needs_gymnax = pytest.mark.skipif(
    importlib.util.find_spec("gymnax") is None, reason="gymnax is installed --no-deps, outside .[dev] (docs/anakin.md)"
)


def rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def filled(capacity, num_envs, steps):
    """A ring whose env ``e`` holds ``100 e + t`` at its step ``t`` (``steps`` of them added)."""
    buffer = ring.init({"x": jnp.zeros((), jnp.int32)}, num_envs, capacity)
    for t in range(steps):
        buffer = ring.add(buffer, {"x": 100 * jnp.arange(num_envs) + t})
    return buffer


def test_the_ring_wraps_over_its_oldest_rows():
    buffer = filled(capacity=3, num_envs=2, steps=5)
    assert int(buffer.position) == 2 and int(buffer.size) == 3
    assert np.asarray(buffer.data["x"]).tolist() == [[3, 4, 2], [103, 104, 102]]
    windows, _ = ring.sample(buffer, jax.random.PRNGKey(0), 200, length=2)
    starts = {tuple(w) for w in np.asarray(windows["x"]).tolist()}
    # windows of two consecutive steps of one env, never across the write position (4 -> 2)
    assert starts == {(2, 3), (3, 4), (102, 103), (103, 104)}


def test_the_draw_is_uniform_over_envs_and_rows():
    buffer = filled(capacity=10, num_envs=2, steps=25)  # full: steps 15..24 of each env
    windows, drawn = ring.sample(buffer, jax.random.PRNGKey(0), 40_000)
    values, counts = np.unique(np.asarray(windows["x"])[:, 0], return_counts=True)
    assert values.tolist() == [*range(15, 25), *range(115, 125)]
    expected = 40_000 / 20
    chi2 = float(np.sum((counts - expected) ** 2 / expected))
    assert chi2 < 43.8, counts  # (chi-square, 19 degrees of freedom: p = 0.001)
    assert abs(float(np.mean(np.asarray(drawn.envs))) - 0.5) < 0.01
    assert np.allclose(np.asarray(drawn.probability) * int(drawn.table_size), 1.0)


def test_a_prioritized_draw_follows_the_priorities_and_takes_new_ones():
    """Draws in proportion to priority ** exponent over the written windows; new rows get the
    highest priority so far; ``set_priorities`` writes the drawn rows'."""
    buffer = ring.init({"x": jnp.zeros((), jnp.int32)}, 2, 8, prioritized=True)
    for t in range(6):
        buffer = ring.add(buffer, {"x": 100 * jnp.arange(2) + t})
    assert np.asarray(buffer.priorities)[:, :6].tolist() == [[1.0] * 6] * 2  # (1 in an empty ring, then the max)
    # window starts 0..4 (length 2); give env 1's row 3 priority 4, the rest 1: weights 2 and 1/2 (exponent 0.5)
    everything = ring.Drawn(jnp.asarray([0, 0, 0, 0, 0, 1, 1, 1, 1, 1]), jnp.asarray([0, 1, 2, 3, 4] * 2), None, None)
    buffer = ring.set_priorities(buffer, everything, jnp.asarray([1.0] * 8 + [4.0, 1.0]))
    windows, drawn = ring.sample(buffer, jax.random.PRNGKey(0), 60_000, length=2, priority_exponent=0.5)
    starts = np.asarray(windows["x"])[:, 0]
    assert set(np.unique(starts).tolist()) == {0, 1, 2, 3, 4, 100, 101, 102, 103, 104}  # (never start 5: half a window)
    assert abs(np.mean(starts == 103) - 2 / 11) < 0.01 and abs(np.mean(starts == 0) - 1 / 11) < 0.01
    assert np.allclose(np.asarray(drawn.probability)[starts == 103], 2 / 11) and int(drawn.table_size) == 10
    buffer = ring.add(buffer, {"x": jnp.asarray([6, 106])})
    assert np.asarray(buffer.priorities)[:, 6].tolist() == [4.0, 4.0]
    with pytest.raises(ValueError, match="prioritized=True"):
        ring.sample(filled(4, 1, 2), jax.random.PRNGKey(0), 1, priority_exponent=0.6)


def test_only_whole_windows_are_drawn_before_the_ring_is_full():
    assert int(ring.num_windows(filled(5, 1, 0), 3)) == 0
    buffer = filled(capacity=10, num_envs=1, steps=4)
    assert int(ring.num_windows(buffer, 3)) == 2 and int(ring.num_windows(buffer, 1)) == 4
    windows, _ = ring.sample(buffer, jax.random.PRNGKey(1), 100, length=3)
    assert {tuple(w) for w in np.asarray(windows["x"]).tolist()} == {(0, 1, 2), (1, 2, 3)}
    with pytest.raises(ValueError, match="capacity >= 1"):
        ring.init({"x": jnp.zeros(())}, 1, 0)


def test_n_step_transitions_stop_at_the_first_episode_end():
    """Windows of 3 steps: one that goes on, one whose second step terminates, one whose first
    step is truncated (the adders' return, bootstrap discount and next observation)."""
    g = 0.5
    f = lambda *v: jnp.asarray(v, jnp.float32)  # noqa: E731
    b = lambda *v: jnp.asarray(v, bool)  # noqa: E731
    windows = {
        "observation": jnp.asarray([[1, 2, 3], [4, 5, 6], [7, 8, 9]], jnp.float32)[..., None],
        "action": jnp.asarray([[0, 1, 1], [1, 0, 0], [1, 1, 0]], jnp.int32),
        "reward": jnp.stack([f(1, 2, 4), f(1, 2, 4), f(1, 2, 4)]),
        "terminated": jnp.stack([b(0, 0, 0), b(0, 1, 0), b(0, 0, 0)]),
        "truncated": jnp.stack([b(0, 0, 0), b(0, 0, 0), b(1, 0, 0)]),
        "next_observation": jnp.asarray([[10, 20, 30], [40, 50, 60], [70, 80, 90]], jnp.float32)[..., None],
    }
    out = {k: np.asarray(v) for k, v in n_step_transitions(windows, g).items()}
    assert out["reward"].tolist() == [1 + g * 2 + g * g * 4, 1 + g * 2, 1.0]
    assert out["discount"].tolist() == [g**3, 0.0, g]
    assert out["next_observation"][:, 0].tolist() == [30, 50, 70]
    assert out["observation"][:, 0].tolist() == [1, 4, 7] and out["action"].tolist() == [0, 1, 1]


def short(seed=0, agent_settings=None, **flat):
    """A few dispatches of DQN on gymnax's CartPole that stop by budget, not by solving."""
    from shoal.launch.experiments.config import experiment_config

    return experiment_config(
        "dqn",
        "gymnax:CartPole-v1",
        agent_settings=agent_settings,
        seed=seed,
        max_env_steps=3072,
        eval_every=1024,
        target_return=1e9,
        progress=False,
        **flat,
    )


@needs_gymnax
@pytest.mark.e2e  # (a training run to the solve, ~15 s)
def test_anakin_dqn_solves_gymnax_cartpole(tmp_path):
    from shoal.launch.experiments.anakin import run_anakin
    from shoal.launch.experiments.config import experiment_config

    config = experiment_config(
        "dqn", "gymnax:CartPole-v1", seed=0, max_env_steps=50_000, progress=False, run_dir=str(tmp_path / "run")
    )
    result = run_anakin(config)
    assert result["solved"] and result["launcher"] == "anakin" and result["agent"] == "dqn", result
    learner = rows(tmp_path / "run" / "learner.csv")
    assert "loss" in learner[-1] and int(learner[-1]["learner_steps"]) == result["learner_steps"] > 0
    # the replay ratio: batch_size x SGD steps per env step after min_replay_size (32 for the defaults)
    ratio = 64 * result["learner_steps"] / (result["env_steps"] - 1000)
    assert 28 <= ratio <= 33, ratio
    assert json.loads((tmp_path / "run" / "result.json").read_text())["env_steps"] == result["env_steps"]
    # the run's outputs as a PPO run's: load_policy (DQN's greedy policy) and shoal evaluate
    from shoal.launch import load_policy
    from shoal.launch.experiments.anakin.evaluation import evaluate_compiled

    policy = load_policy(str(tmp_path / "run"))
    assert policy.anakin and policy.checkpoint == result["env_steps"]
    returns, _ = evaluate_compiled(policy, 5, 0, 5)
    assert float(np.mean(returns)) >= 400, returns


@needs_gymnax
@pytest.mark.e2e  # (three short training runs)
def test_a_seeded_anakin_dqn_run_is_the_same_twice_and_calls_dqns_loss(tmp_path, monkeypatch):
    from shoal.agents.dqn import learning
    from shoal.agents.dqn.builder import DQNBuilder
    from shoal.launch.experiments.anakin import run_anakin

    traced = []

    def counting_loss(self, *args):
        traced.append(args[3]["observation"].shape)
        return learning.double_q_loss(*args, self.config.huber_delta)

    monkeypatch.setattr(DQNBuilder, "loss", counting_loss)
    runs = [run_anakin(short(run_dir=str(tmp_path / f"run{i}"))) for i in range(2)]
    assert traced, "the compiled loop did not call the builder's loss"
    same = ("env_steps", "learner_steps", "num_evals", "final_eval_return")
    assert {k: runs[0][k] for k in same} == {k: runs[1][k] for k in same}
    for name, columns in (("eval.csv", ["eval_return"]), ("learner.csv", ["loss", "q_mean"])):
        first, second = (rows(tmp_path / f"run{i}" / name) for i in range(2))
        assert [[r[c] for c in columns] for r in first] == [[r[c] for c in columns] for r in second], name
    run_anakin(short(seed=1, run_dir=str(tmp_path / "seed1")))
    losses = [[r["loss"] for r in rows(tmp_path / run / "learner.csv")] for run in ("run0", "seed1")]
    assert losses[0] != losses[1]


@needs_gymnax
@pytest.mark.e2e  # (three training runs, through `shoal train`'s code)
def test_a_resumed_anakin_dqn_run_continues_exactly(tmp_path, capsys, monkeypatch):
    """Stopped at 2,048 env steps and resumed to 3,072 (16 per iteration: 8 envs, 2 steps) (the ring, its position and the keys in the
    checkpoint), a run logs what the run that never stopped logs."""
    from shoal.launch.experiments.anakin import run_anakin
    from shoal.launch.experiments.cli.main import main

    monkeypatch.chdir(tmp_path)
    run_anakin(short(run_dir=str(tmp_path / "whole")))
    flags = ["--eval-every", "1024", "--target-return", "1e9", "--quiet"]
    first = ["train", "--agent", "dqn", "--env", "gymnax:CartPole-v1", "--max-env-steps", "2048", *flags]
    assert main([*first, "--run-dir", str(tmp_path / "parts")]) == 0
    assert main(["train", "--resume", str(tmp_path / "parts"), "--max-env-steps", "3072", "--quiet"]) == 0
    resumed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert resumed["resumed_from"] == 2048 and resumed["env_steps"] == 3072, resumed
    for name, columns in (("eval.csv", ["env_steps", "eval_return"]), ("learner.csv", ["learner_steps", "loss"])):
        whole, parts = (rows(tmp_path / run / name) for run in ("whole", "parts"))
        assert [[r[c] for c in columns] for r in parts] == [[r[c] for c in columns] for r in whole], name


@needs_gymnax
@pytest.mark.e2e  # (a short training run)
def test_prioritized_anakin_dqn_trains_on_its_priorities(tmp_path):
    """``prioritized_replay``: the ring draws by priority, DQN's update weighs the draws and the
    drawn windows' priorities become their |TD| (the checkpointed ring's priorities differ)."""
    from shoal.envs.jax_envs import make_jax_env
    from shoal.envs.jax_vector import JaxVectorEnv
    from shoal.launch.experiments.anakin import dqn, run_anakin
    from shoal.launch.experiments.anakin.checkpoints import restore_checkpoint

    config = short(agent_settings={"prioritized_replay": True}, run_dir=str(tmp_path / "run"))
    result = run_anakin(config)
    assert result["learner_steps"] > 0 and np.isfinite(float(rows(tmp_path / "run" / "learner.csv")[-1]["loss"]))
    venv = JaxVectorEnv(*make_jax_env(config.env.id, config.env.args)[:1], config.env.num_envs)
    loop = dqn.make_loop(
        config.builder, config.make_networks(venv.spec), venv, 1, *jax.random.split(jax.random.PRNGKey(0), 3)
    )
    carry, _ = restore_checkpoint(str(tmp_path / "run"), jax.device_get(loop.initial))
    written = np.asarray(carry.buffer.priorities)[:, : int(carry.buffer.size)]
    assert written.min() > 0 and len(np.unique(written)) > 100  # (|TD|s written back, not the new rows' one value)


@needs_gymnax
def test_what_anakin_dqn_refuses_is_one_line(tmp_path, capsys, monkeypatch):
    from shoal.launch.experiments.cli.main import main

    monkeypatch.chdir(tmp_path)
    run_dir = tmp_path / "run"
    expected = "trains PPO, DQN and SAC for now (--agent ppo|dqn|sac), not impala"
    assert main(["train", "--agent", "impala", "--env", "gymnax:CartPole-v1", "--run-dir", str(run_dir)]) == 2
    captured = capsys.readouterr()
    errors = captured.err.strip().splitlines()
    assert len(errors) == 1 and errors[0].startswith("shoal: error:") and expected in errors[0], errors
    assert captured.out == "" and not run_dir.exists()


@needs_gymnax
@pytest.mark.e2e  # (`shoal train` in a subprocess: two host devices are set before JAX starts)
@pytest.mark.parametrize("prioritized", [False, True])
def test_anakin_dqn_splits_its_envs_and_ring_over_two_devices(prioritized, tmp_path):
    """Each device steps half the envs into its half of the ring and draws half the batch (uniform
    or prioritized); the update all-reduces the gradients."""
    import os

    from tests.shoal_cli import run_shoal

    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2")
    args = ["--agent", "dqn", "--env", "gymnax:CartPole-v1", "--max-env-steps", "3072", "--eval-every", "1024"]
    args += ["--target-return", "1e9", "--set", f"prioritized_replay={str(prioritized).lower()}", "--quiet"]
    proc = run_shoal("train", *args, "--run-dir", str(tmp_path / "run"), timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["devices"] == 2 and result["env_steps"] == 3072 and result["learner_steps"] > 0, result
    assert np.isfinite(float(rows(tmp_path / "run" / "learner.csv")[-1]["loss"]))


@needs_gymnax
def test_gymnax_minatar_planes_reach_the_agents_as_minatars_frames_and_its_network_reads_them():
    """gymnax gives MinAtar's planes as float32 ``[H, W, C]``; Shoal gives them as MinAtar's own
    games do (uint8 ``[C, H, W]``, the same values), on reset and in a step's final observation,
    so that the MinAtar preset's convolutional torso reads them (it once fell back to an MLP)."""
    import pickle

    import gymnax

    from shoal.agents.dqn.builder import DQNBuilder
    from shoal.agents.dqn.config import DQNConfig
    from shoal.agents.presets import find_preset
    from shoal.envs.jax_envs import make_jax_env
    from shoal.envs.jax_vector import jax_environment_spec

    env, params = make_jax_env("gymnax:Freeway-MinAtar")
    raw, _ = gymnax.make("Freeway-MinAtar")
    spec = jax_environment_spec(env, params, 2)
    assert spec.observation.shape == (7, 10, 10) and spec.observation.dtype == np.uint8
    assert pickle.loads(pickle.dumps(env)).observation_space(params).shape == (7, 10, 10)  # (and copies)
    key = jax.random.PRNGKey(3)
    obs, state = env.reset(key, params)
    raw_obs, _ = raw.reset(key, params)
    np.testing.assert_array_equal(np.asarray(obs), np.transpose(np.asarray(raw_obs), (2, 0, 1)).astype(np.uint8))
    step = env.step(jax.random.PRNGKey(4), state, 1, params)
    raw_step = raw.step(jax.random.PRNGKey(4), state, 1, params)
    for mine, theirs in ((step[0], raw_step[0]), (step[-1]["final_observation"], raw_step[-1]["final_observation"])):
        assert mine.dtype == jnp.uint8
        np.testing.assert_array_equal(np.asarray(mine), np.transpose(np.asarray(theirs), (2, 0, 1)))

    settings = find_preset("dqn", "gymnax:Freeway-MinAtar").settings
    assert settings["torso"] == "minatar"
    conv = DQNBuilder(DQNConfig(**{k: v for k, v in settings.items() if k in DQNConfig.__dataclass_fields__}))
    conv.validate(spec, 1)
    assert conv.make_networks(spec).q_network.has_convolutions
    flat = DQNBuilder(DQNConfig(torso="mlp", hidden_sizes=(32,)))
    flat.validate(spec, 1)
    q = flat.make_networks(spec).q_network
    assert not q.has_convolutions
    weights = q.init(jax.random.PRNGKey(0), jnp.zeros((1, 7, 10, 10), jnp.uint8))["params"]
    assert weights["Dense_0"]["kernel"].shape == (700, 32)


def test_a_convolutional_torso_named_for_observations_that_are_not_frames_is_one_line():
    from shoal.agents.dqn.builder import DQNBuilder
    from shoal.agents.dqn.config import DQNConfig
    from shoal.agents.ppo.builder import PPOBuilder
    from shoal.agents.ppo.config import PPOConfig
    from shoal.envs import environment_spec

    spec = environment_spec("CartPole-v1", 2)
    for builder in (DQNBuilder(DQNConfig(torso="minatar")), PPOBuilder(PPOConfig(torso="nature"))):
        with pytest.raises(ValueError, match=r"torso=\w+ reads image observations .* float32 \(4,\): use torso=auto"):
            builder.validate(spec, 1)
    DQNBuilder(DQNConfig(torso="mlp")).validate(spec, 1)  # (an MLP reads anything flat)
