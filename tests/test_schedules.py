"""PPO's schedules (learning rate and clip range, ``constant`` or ``linear`` to 0 over
``schedule_env_steps``) and its value-loss clipping, and the presets that use them as their
sources do. Unit tests: no training run (the learner tests update a 16-unit network on random
batches)."""

import dataclasses
import json
import os
import subprocess
import sys

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from shoal.agents.components.networks import ActorCritic
from shoal.agents.ppo import PPOBuilder, PPOConfig, PPONetworks
from shoal.agents.ppo import learning as ppo
from shoal.agents.ppo.config import check_schedules
from shoal.agents.presets import presets
from shoal.core.settings import parse_setting
from shoal.core.specs import make_environment_spec
from shoal.learners import ReplicatedLearner
from tests.pmap_equivalence_worker import ACTIONS, LENGTH, OBS, ROWS, sequence_batches

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXTRAS = {
    "log_prob": lambda rng: np.log(rng.uniform(0.2, 0.5, (ROWS, LENGTH))).astype(np.float32),
    "policy_version": lambda rng: np.zeros((ROWS, LENGTH), np.int32),
}


def linear(**changes) -> PPOConfig:
    return PPOConfig(
        **{
            "learning_rate": 1e-3,
            "clip_epsilon": 0.2,
            "num_epochs": 4,
            "num_minibatches": 4,
            "learning_rate_schedule": "linear",
            "clip_schedule": "linear",
            "schedule_env_steps": 1_000,
            **changes,
        }
    )


# --- the schedules' values


def test_linear_schedules_decay_to_zero_over_the_env_step_budget():
    config = linear()  # 16 optimizer steps per update; 100 env steps per update: 10 updates
    lr = ppo.learning_rate(config, 100)
    at = lambda updates, step=0: updates * 16 + step  # noqa: E731 (optimizer steps)
    assert float(lr(at(0))) == pytest.approx(1e-3)
    assert float(lr(at(5))) == pytest.approx(5e-4)  # half the env steps: half the step size
    assert float(lr(at(5, 15))) == pytest.approx(5e-4)  # constant over an update's epochs (CleanRL)
    assert float(lr(at(10))) == 0.0 and float(lr(at(25))) == 0.0  # never negative
    assert float(ppo.clip_epsilon(config, jnp.int32(at(5)), 100)) == pytest.approx(0.1)
    assert float(ppo.clip_epsilon(config, jnp.int32(at(10)), 100)) == 0.0


def test_constant_schedules_keep_the_optimizer_state_as_before():
    config, params = PPOConfig(), {"w": jnp.ones(3)}
    assert ppo.learning_rate(config, 100) == config.learning_rate
    assert ppo.clip_epsilon(config, jnp.int32(7), 100) == config.clip_epsilon
    # a constant step size leaves no schedule state: checkpoints of earlier runs still restore
    state = ppo.make_optimizer(config).init(params)
    assert jax.tree_util.tree_structure(state) == jax.tree_util.tree_structure(
        optax.chain(optax.clip_by_global_norm(0.5), optax.adam(1e-3, eps=1e-5)).init(params)
    )


def test_the_optimizer_steps_at_the_scheduled_rate():
    """Adam's own count drives the schedule: at half the budget its step is a constant
    optimizer's at half the rate."""
    config, params, grads = linear(), {"w": jnp.ones(3)}, {"w": jnp.arange(3.0)}

    def step(optimizer, count):
        state = optimizer.init(params)
        state = jax.tree_util.tree_map(lambda x: jnp.full_like(x, count) if x.dtype == jnp.int32 else x, state)
        assert int(ppo.optimizer_steps(state)) == count
        return optimizer.update(grads, state, params)[0]["w"]

    halfway = step(ppo.make_optimizer(config, 100), 5 * 16)
    constant = step(
        ppo.make_optimizer(PPOConfig(learning_rate=5e-4, max_gradient_norm=config.max_gradient_norm)), 5 * 16
    )
    np.testing.assert_allclose(halfway, constant, rtol=1e-6)
    assert np.abs(halfway).max() > 0


# --- in the learner: keyed to env steps, logged, resumed


def learner(config, batches):
    networks = PPONetworks(ActorCritic((16,), ACTIONS), (OBS,), ACTIONS)
    state = ppo.init_state(jax.random.PRNGKey(0), networks, config)
    return ReplicatedLearner(state, ppo.make_update(networks, config), iter(batches), devices=jax.local_devices()[:1])


def test_the_learner_logs_the_schedules_and_a_restored_one_continues_them():
    per_update = ROWS * LENGTH  # env steps per update: the batch's rows x steps
    config = linear(
        num_epochs=2, num_minibatches=2, learning_rate=1e-2, schedule_env_steps=4 * per_update, clip_value_loss=True
    )
    batches = list(sequence_batches(2, 5, EXTRAS))
    original = learner(config, batches)
    logged = [original.step() for _ in range(3)]
    assert [float(m["learning_rate"]) for m in logged] == pytest.approx([1e-2, 7.5e-3, 5e-3])
    assert [float(m["clip_epsilon"]) for m in logged] == pytest.approx([0.2, 0.15, 0.1])
    saved = jax.tree_util.tree_map(np.asarray, original.save())
    original.close()

    restored = learner(config, batches[3:])
    restored.restore(saved)
    logged = [restored.step() for _ in range(2)]
    restored.close()
    assert [float(m["learning_rate"]) for m in logged] == pytest.approx([2.5e-3, 0.0])
    assert [float(m["clip_epsilon"]) for m in logged] == pytest.approx([0.05, 0.0])


# --- value-loss clipping


def test_clipped_value_loss_on_a_hand_made_case():
    old, target, eps = jnp.array([1.0]), jnp.array([2.0]), 0.2
    loss = lambda v, clip: float(ppo.value_loss(jnp.array([v]), old, target, eps, clip))  # noqa: E731
    assert loss(1.1, False) == pytest.approx(0.5 * 0.9**2)
    assert loss(1.1, True) == loss(1.1, False)  # within eps of the old value: unchanged
    assert loss(1.5, True) == pytest.approx(0.5 * 0.8**2)  # beyond: the clipped value 1.2 counts
    assert loss(1.5, True) > loss(1.5, False) == pytest.approx(0.5 * 0.5**2)
    assert loss(0.5, True) == loss(0.5, False)  # moved away from the target: unclipped is larger
    # (CleanRL's clip_vloss: no gradient pulls a value that moved beyond eps toward the target)
    grad = jax.grad(lambda v: ppo.value_loss(v, old, target, eps, True))(jnp.array([1.5]))
    assert float(grad[0]) == 0.0


def test_clip_value_loss_changes_the_update_and_constant_schedules_are_logged():
    batches = list(sequence_batches(2, 2, EXTRAS))
    params = []
    plain = PPOConfig(num_epochs=2, num_minibatches=2, learning_rate=1e-2, clip_epsilon=0.01)
    for config in (plain, dataclasses.replace(plain, clip_value_loss=True)):
        run = learner(config, batches)
        metrics = [run.step() for _ in batches]
        params.append(run.get_variables()[1])
        run.close()
        assert float(metrics[-1]["learning_rate"]) == pytest.approx(config.learning_rate)
        assert float(metrics[-1]["clip_epsilon"]) == pytest.approx(config.clip_epsilon)
    diffs = [
        float(np.max(np.abs(np.asarray(a) - np.asarray(b))))
        for a, b in zip(jax.tree_util.tree_leaves(params[0]), jax.tree_util.tree_leaves(params[1]))
    ]
    assert max(diffs) > 1e-4  # values moved beyond eps: the clipped loss trained otherwise


# --- validation


@pytest.fixture(scope="module")
def spec():
    return make_environment_spec(gym.make("CartPole-v1"), num_envs=4)


@pytest.mark.parametrize("field", ["learning_rate_schedule", "clip_schedule"])
def test_an_unknown_schedule_is_refused_in_one_line(field, spec):
    with pytest.raises(ValueError, match=f"^{field} must be one of constant, linear, got 'cosine'$"):
        PPOBuilder(PPOConfig(**{field: "cosine"})).validate(spec, 1)


def test_a_linear_schedule_needs_its_horizon(spec):
    with pytest.raises(ValueError) as error:
        PPOBuilder(PPOConfig(learning_rate_schedule="linear")).validate(spec, 1)
    message = str(error.value)
    assert "\n" not in message and "learning_rate_schedule=linear" in message
    assert "--set schedule_env_steps=" in message
    with pytest.raises(ValueError, match="clip_schedule=linear decays over schedule_env_steps"):
        check_schedules(PPOConfig(clip_schedule="linear"))
    PPOBuilder(linear()).validate(spec, 1)
    check_schedules(PPOConfig())  # constant schedules need no horizon


def test_the_new_fields_parse_from_the_command_line():
    assert parse_setting(PPOConfig, "learning_rate_schedule", "linear") == "linear"
    assert parse_setting(PPOConfig, "clip_value_loss", "true") is True
    assert parse_setting(PPOConfig, "schedule_env_steps", "10000000") == 10_000_000


# --- the presets set what their sources do


def ppo_preset(family):
    return next(p for p in presets("ppo") if p.family == family)


def resolved(family, env_id, **experiment):
    """The PPO config an experiment on ``env_id`` runs with ``family``'s preset."""
    from shoal.launch.experiments.config import experiment_config

    return experiment_config("ppo", env_id, family, **experiment).builder.config


def test_the_schedule_horizon_follows_the_runs_budget_unless_given():
    assert resolved("mujoco", "HalfCheetah-v5", max_env_steps=300_000).schedule_env_steps == 300_000
    given = experiment_config_with(schedule_env_steps=50_000)
    assert given.schedule_env_steps == 50_000


def experiment_config_with(**settings):
    from shoal.launch.experiments.config import experiment_config

    return experiment_config("ppo", "HalfCheetah-v5", "mujoco", settings).builder.config


def test_atari_preset_is_cleanrl_ppo_atari():
    preset = ppo_preset("atari")
    config = resolved("atari", "ALE/Breakout-v5")
    assert (config.learning_rate, config.learning_rate_schedule) == (2.5e-4, "linear")  # anneal_lr
    assert (config.clip_epsilon, config.clip_schedule) == (0.1, "constant")
    assert config.clip_value_loss  # clip_vloss
    assert config.schedule_env_steps == preset.experiment["max_env_steps"] == 10_000_000
    check_schedules(config)


def test_mujoco_preset_is_cleanrl_ppo_continuous_action():
    preset = ppo_preset("mujoco")
    config = resolved("mujoco", "HalfCheetah-v5")
    assert (config.learning_rate, config.learning_rate_schedule) == (3e-4, "linear")
    assert (config.clip_epsilon, config.clip_schedule, config.clip_value_loss) == (0.2, "constant", True)
    assert config.schedule_env_steps == preset.experiment["max_env_steps"] == 1_000_000
    check_schedules(config)


@pytest.mark.parametrize("family", ["classic", "box2d"])
def test_other_presets_keep_constant_schedules_and_plain_value_loss(family):
    # RL-Zoo's LunarLander PPO: constant learning rate 3e-4 and clip 0.2, SB3's clip_range_vf=None
    config = PPOConfig(**ppo_preset(family).settings)
    assert (config.learning_rate_schedule, config.clip_schedule, config.clip_value_loss) == (
        "constant",
        "constant",
        False,
    )


# --- the same schedules on 2 devices


@pytest.mark.e2e  # (a subprocess with 2 forced CPU devices: ~20 s)
def test_two_devices_follow_the_same_schedule():
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2", JAX_PLATFORMS="cpu")
    proc = subprocess.run(
        [sys.executable, "-m", "tests.test_schedules"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["one"] == pytest.approx([1e-2, 5e-3, 0.0])
    assert result["two"] == result["one"]


def _learning_rates(devices) -> list[float]:
    config = linear(num_epochs=2, num_minibatches=2, learning_rate=1e-2, schedule_env_steps=2 * ROWS * LENGTH)
    networks = PPONetworks(ActorCritic((16,), ACTIONS), (OBS,), ACTIONS)
    run = ReplicatedLearner(
        ppo.init_state(jax.random.PRNGKey(0), networks, config),
        ppo.make_update(networks, config),
        iter(list(sequence_batches(2, 3, EXTRAS))),
        devices=devices,
    )
    rates = [float(run.step()["learning_rate"]) for _ in range(3)]
    run.close()
    return rates


if __name__ == "__main__":
    assert len(jax.local_devices()) == 2, jax.local_devices()
    print(json.dumps({"one": _learning_rates(jax.local_devices()[:1]), "two": _learning_rates(jax.local_devices())}))


def test_the_budget_is_the_builders_hook_and_the_callers_builder_is_unchanged():
    """``AgentBuilder.for_budget`` gives the run's builder; the one the caller made keeps its
    config (the experiment layer used to rewrite it in place)."""
    from shoal.agents import get_builder
    from shoal.launch import ExperimentConfig

    builder = get_builder("ppo", learning_rate_schedule="linear")
    config = ExperimentConfig.from_flat(builder=builder, env_id="CartPole-v1", max_env_steps=12_345)
    assert config.builder.config.schedule_env_steps == 12_345
    assert builder.config.schedule_env_steps == 0
    constant = get_builder("ppo")
    assert ExperimentConfig.from_flat(builder=constant, env_id="CartPole-v1", max_env_steps=12_345).builder is constant
