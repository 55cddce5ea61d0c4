"""MinAtar (the ``minatar`` extra): its ids resolve, its boolean planes reach the agents as uint8
channels-first frames, ``auto`` gives them the MinAtar network (whose patch matmul is the
convolution it stands for), its presets apply, and DQN trains on it with its preset. (What PPO
and DQN reach on it: ``benchmarks/solve.py --suite minatar``.)"""

import flax.linen as nn
import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from shoal.agents.components.torsos import MinAtarCNN, NatureCNN, Torso, choose_torso
from shoal.agents.presets import find_preset, task_family
from shoal.envs import environment_spec, make_vector_env
from shoal.launch import run_experiment
from shoal.launch.experiments.config import experiment_config

BREAKOUT = "MinAtar/Breakout-v1"


def test_minatar_planes_become_uint8_frames_channels_first():
    spec = environment_spec(BREAKOUT, 4)
    assert spec.observation.shape == (4, 10, 10) and spec.observation.dtype == np.uint8
    assert spec.num_actions == 3  # (v1: the game's minimal action set)
    env = make_vector_env(BREAKOUT, 2, seed=0)
    planes = gym.make(BREAKOUT).unwrapped
    planes.reset(seed=0)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (2, 4, 10, 10) and obs.dtype == np.uint8 and set(np.unique(obs)) <= {0, 1}
    np.testing.assert_array_equal(obs[0], np.transpose(planes.game.state(), (2, 0, 1)).astype(np.uint8))
    env.close()


def test_auto_picks_the_minatar_network_for_small_frames_and_nature_refuses_them():
    small = gym.spaces.Box(0, 1, (4, 10, 10), np.uint8)
    assert choose_torso("auto", small.shape, small) == Torso("minatar", 1.0)
    atari = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    assert choose_torso("auto", atari.shape, atari) == Torso("nature", 1.0 / 255.0)
    with pytest.raises(ValueError, match="torso 'nature' takes frames of at least 36x36, got 10x10"):
        choose_torso("nature", small.shape, small)
    with pytest.raises(ValueError, match="torso must be one of auto, nature, impala, minatar, got 'resnet'"):
        choose_torso("resnet", small.shape, small)


def test_the_minatar_networks_patch_matmul_is_its_3x3_convolution():
    frames = jnp.asarray(np.random.default_rng(0).integers(0, 2, (5, 6, 10, 10)), jnp.uint8)
    torso = MinAtarCNN()
    params = torso.init(jax.random.PRNGKey(0), frames)
    kernel = params["params"]["conv"]["kernel"]  # [9 * channels, 16]: patch entries (row, column, channel)
    conv = nn.Conv(16, (3, 3), padding="VALID")
    x = jnp.transpose(frames.astype(jnp.float32), (0, 2, 3, 1))
    conv_params = {"params": {"kernel": kernel.reshape(3, 3, 6, 16), "bias": params["params"]["conv"]["bias"]}}
    expected = nn.relu(conv.apply(conv_params, x)).reshape(5, -1)
    dense = params["params"]["Dense_0"]
    np.testing.assert_allclose(
        torso.apply(params, frames), nn.relu(expected @ dense["kernel"] + dense["bias"]), rtol=1e-5, atol=1e-5
    )


@pytest.mark.parametrize(
    "size",  # (37x41 in the fast layer; each size compiles four programs: ~2-5 s)
    [pytest.param((84, 84), marks=pytest.mark.e2e), (37, 41), pytest.param((50, 63), marks=pytest.mark.e2e)],
)
def test_the_nature_networks_folded_first_convolution_is_its_8x8_stride_4_convolution(size):
    """The Nature network's params are those of its plain form (``nn.Conv``s named as flax names
    them: a checkpoint of either loads in the other), and so are its outputs, on frames whose
    size is not a multiple of the stride too."""

    class Plain(nn.Module):
        @nn.compact
        def __call__(self, frames):
            x = jnp.transpose(frames.astype(jnp.float32) / 255.0, (0, 2, 3, 1))
            for features, kernel, stride in ((32, 8, 4), (64, 4, 2), (64, 3, 1)):
                x = nn.relu(
                    nn.Conv(
                        features,
                        (kernel, kernel),
                        (stride, stride),
                        padding="VALID",
                        kernel_init=nn.initializers.orthogonal(np.sqrt(2)),
                    )(x)
                )
            return nn.relu(nn.Dense(512, kernel_init=nn.initializers.orthogonal(np.sqrt(2)))(x.reshape(x.shape[0], -1)))

    frames = jnp.asarray(np.random.default_rng(0).integers(0, 256, (3, 4, *size)), jnp.uint8)
    params = NatureCNN().init(jax.random.PRNGKey(0), frames)
    plain_params = Plain().init(jax.random.PRNGKey(0), frames)
    assert jax.tree_util.tree_structure(params) == jax.tree_util.tree_structure(plain_params)
    for ours, plain in zip(jax.tree_util.tree_leaves(params), jax.tree_util.tree_leaves(plain_params)):
        np.testing.assert_array_equal(ours, plain)
    ours, plain = (jax.jit(network.apply) for network in (NatureCNN(), Plain()))  # (one compile each, not one per op)
    np.testing.assert_allclose(ours(params, frames), plain(params, frames), rtol=1e-5, atol=1e-5)
    grads = jax.jit(jax.grad(lambda p: ours(p, frames).sum()))(params)
    plain_grads = jax.jit(jax.grad(lambda p: plain(p, frames).sum()))(params)
    for ours, plain in zip(jax.tree_util.tree_leaves(grads), jax.tree_util.tree_leaves(plain_grads)):
        np.testing.assert_allclose(ours, plain, rtol=1e-4, atol=1e-4)


def test_minatar_ids_get_the_minatar_presets():
    assert task_family(BREAKOUT) == "minatar"
    assert find_preset("dqn", BREAKOUT).settings["target_update_period"] == 1_000
    assert find_preset("ppo", "MinAtar/SpaceInvaders-v1").experiment["num_envs"] == 64


def test_an_unknown_minatar_game_is_one_line_naming_close_ids():
    with pytest.raises(ValueError, match="unknown gymnasium environment id 'MinAtar/Breakout-v9'.*MinAtar/Breakout-v1"):
        environment_spec("MinAtar/Breakout-v9", 1)


def test_ppos_mlp_torso_reads_the_planes_flat_with_two_mlps_and_refuses_what_it_cannot_read():
    from shoal.agents.ppo.builder import PPOBuilder
    from shoal.agents.ppo.config import PPOConfig

    spec = environment_spec(BREAKOUT, 4)
    builder = PPOBuilder(PPOConfig(torso="mlp", hidden_sizes=(32, 16)))
    builder.validate(spec, 1)
    networks = builder.make_networks(spec)
    frames = jnp.asarray(np.random.default_rng(0).integers(0, 2, (3, 4, 10, 10)), jnp.uint8)
    params = networks.network.init(jax.random.PRNGKey(0), frames)
    shapes = jax.tree_util.tree_map(lambda x: x.shape, params["params"])
    assert shapes["policy"]["Dense_0"]["kernel"] == (400, 32) and shapes["value"]["Dense_0"]["kernel"] == (400, 32)
    assert "conv" not in str(shapes)
    logits, value = networks.network.apply(params, frames)
    assert logits.shape == (3, 3) and value.shape == (3,)
    with pytest.raises(ValueError, match="torso=mlp reads frames with a categorical, feed-forward policy"):
        PPOBuilder(PPOConfig(torso="mlp", lstm_size=8)).validate(spec, 1)
    with pytest.raises(ValueError, match="torso must be one of auto, nature, impala, minatar, got 'mlp'"):
        choose_torso("mlp", spec.observation.shape)  # (the shared torsos: PPO and DQN read frames flat themselves)


def test_ppos_activation_sets_its_mlps_hidden_layers_and_is_refused_where_there_are_none():
    from shoal.agents.ppo.builder import PPOBuilder
    from shoal.agents.ppo.config import PPOConfig

    spec = environment_spec(BREAKOUT, 4)
    frames = jnp.asarray(np.random.default_rng(0).integers(0, 2, (3, 4, 10, 10)), jnp.uint8)
    builders = {act: PPOBuilder(PPOConfig(torso="mlp", hidden_sizes=(8,), activation=act)) for act in ("tanh", "relu")}
    networks = {act: b.make_networks(spec).network for act, b in builders.items()}
    params = networks["tanh"].init(jax.random.PRNGKey(0), frames)  # (the same parameters fit both)
    p = params["params"]["policy"]
    flat = frames.reshape(3, -1).astype(jnp.float32)
    for act, f in (("tanh", jnp.tanh), ("relu", jax.nn.relu)):
        builders[act].validate(spec, 1)
        hidden = f(flat @ p["Dense_0"]["kernel"] + p["Dense_0"]["bias"])
        expected = hidden @ p["Dense_1"]["kernel"] + p["Dense_1"]["bias"]
        logits, _ = networks[act].apply(params, frames)
        np.testing.assert_allclose(logits, expected, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="activation must be one of tanh, relu, got 'gelu'"):
        PPOBuilder(PPOConfig(torso="mlp", activation="gelu")).validate(spec, 1)
    with pytest.raises(
        ValueError, match="activation=relu set the feed-forward MLPs .hidden_sizes.; this network has none"
    ):
        PPOBuilder(PPOConfig(activation="relu")).validate(spec, 1)  # (the MinAtar torso: no MLPs)
    with pytest.raises(ValueError, match="^orthogonal_init=false set the feed-forward MLPs"):
        PPOBuilder(PPOConfig(orthogonal_init=False, lstm_size=8)).validate(spec, 1)


def test_ppos_orthogonal_init_is_cleanrls_and_without_it_flaxs_default():
    from shoal.agents.ppo.builder import PPOBuilder
    from shoal.agents.ppo.config import PPOConfig

    spec = environment_spec(BREAKOUT, 4)
    frames = jnp.zeros((1, 4, 10, 10), jnp.uint8)
    kernels = {}
    for orthogonal in (True, False):
        builder = PPOBuilder(PPOConfig(torso="mlp", hidden_sizes=(64,), orthogonal_init=orthogonal))
        builder.validate(spec, 1)
        params = builder.make_networks(spec).network.init(jax.random.PRNGKey(0), frames)["params"]
        kernels[orthogonal] = params["policy"]["Dense_0"]["kernel"], params["policy"]["Dense_1"]["kernel"]
    hidden, head = kernels[True]
    np.testing.assert_allclose(hidden.T @ hidden, 2.0 * np.eye(64), atol=1e-4)  # (gain sqrt 2: 400 > 64 rows)
    np.testing.assert_allclose(head.T @ head, 1e-4 * np.eye(3), atol=1e-8)  # (the policy head's gain 0.01)
    hidden, head = kernels[False]  # LeCun normal: variance 1 / fan_in, no orthogonality
    assert abs(float(hidden.std()) - 1 / np.sqrt(400)) < 0.1 / np.sqrt(400)
    assert abs(float(head.std()) - 1 / np.sqrt(64)) < 0.3 / np.sqrt(64)
    assert np.abs(hidden.T @ hidden - np.diag(np.diag(hidden.T @ hidden))).max() > 1e-3


@pytest.mark.e2e
def test_dqn_trains_on_minatar_in_one_process(tmp_path):
    """The preset's network and settings (its replay warm-up cut short), as ``shoal train`` sets them."""
    config = experiment_config(
        "dqn",
        BREAKOUT,
        agent_settings={"min_replay_size": 200, "sgd_steps_per_update": 2},
        seed=0,
        max_env_steps=800,
        eval_every=800,
        eval_episodes=2,
        target_return=1e9,
        run_dir=str(tmp_path / "run"),
        progress=False,
    )
    assert config.preset == "dqn/minatar"
    result = run_experiment(config)
    assert result["env_steps"] == 800 and result["learner_steps"] > 0 and result["num_evals"] >= 1
