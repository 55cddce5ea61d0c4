"""Unit tests of the agent registry and every preset, in this process and without a run: every
registered agent has a builder and a config class whose defaults validate, and every preset of
every agent names only fields that exist, resolves to what it names and validates against an
environment of its family (so a typo in ``agents/*/presets.py`` fails here, not in a user's run)."""

import dataclasses
import functools

import pytest

from shoal.agents import get_builder
from shoal.agents.builders import AgentBuilder
from shoal.agents.presets import describe_presets, find_preset, presets, task_family
from shoal.agents.registry import config_class, registered_agents
from shoal.launch import ExperimentConfig
from shoal.launch.experiments.config import experiment_config
from shoal.launch.experiments.config_groups import FLAT_FIELDS

# An environment of each (family, kind of action): what a preset is validated against.
ENVS = {
    ("classic", "discrete"): "CartPole-v1",
    ("classic", "continuous"): "Pendulum-v1",
    ("box2d", "discrete"): "LunarLander-v3",
    ("box2d", "continuous"): "BipedalWalker-v3",
    ("mujoco", "continuous"): "HalfCheetah-v5",
    ("atari", "discrete"): "ALE/Breakout-v5",
    ("minatar", "discrete"): "MinAtar/Breakout-v1",
    ("memory", "discrete"): "shoal/CartPoleNoVelocity-v1",
    ("gymnax-minatar", "discrete"): "gymnax:Breakout-MinAtar",
    ("brax", "continuous"): "brax:inverted_pendulum",
    ("craftax", "discrete"): "craftax:Craftax-Symbolic-v1",
    ("jaxmarl-mpe", "discrete"): "jaxmarl:MPE_simple_spread_v3",
}
# The kind of action each agent takes first (PPO takes both: its mujoco preset is continuous).
ACTIONS = {
    "dqn": "discrete",
    "impala": "discrete",
    "ppo": "discrete",
    "r2d2": "discrete",
    "sac": "continuous",
    "bc": "discrete",
    "cql": "discrete",
    "iql": "discrete",
}
PRESETS = presets()
EXPERIMENT_FIELDS = set(FLAT_FIELDS) - {"env_id"}  # (the flat names a preset's experiment settings use)


EXTRAS = {
    "box2d": "Box2D",
    "mujoco": "mujoco",
    "atari": "ale_py",
    "minatar": "minatar",
    "gymnax-minatar": "gymnax",
    "brax": "brax",
    "craftax": "craftax",
    "jaxmarl-mpe": "jaxmarl",
}  # (the module each family's extra installs)


def env_for(agent, family):
    return ENVS.get((family, ACTIONS[agent])) or ENVS[next(key for key in ENVS if key[0] == family)]


@functools.cache
def spec_of(env_id, num_envs):
    """The spec of ``env_id`` (built once per id and size in this module)."""
    return ExperimentConfig.from_flat(builder=get_builder("ppo"), env_id=env_id, num_envs=num_envs).environment_spec()


def test_every_agent_has_a_kind_of_action_here():
    assert sorted(ACTIONS) == registered_agents(), "add the new agent to ACTIONS (and an env to ENVS if need be)"


# --- the registry


@pytest.mark.parametrize("agent", registered_agents())
def test_every_registered_agent_has_a_builder_of_its_config_class(agent):
    cls = config_class(agent)
    assert dataclasses.is_dataclass(cls)
    builder = get_builder(agent)
    assert isinstance(builder, AgentBuilder) and type(builder.config) is cls and builder.config == cls()
    assert builder.name == agent
    some_field = dataclasses.fields(cls)[0]
    assert get_builder(agent, **{some_field.name: getattr(cls(), some_field.name)}).config == cls()


@pytest.mark.parametrize("agent", registered_agents())
def test_every_registered_agents_default_config_validates(agent):
    env_id = ENVS[("classic", ACTIONS[agent])]
    config = ExperimentConfig.from_flat(builder=get_builder(agent), env_id=env_id, run_dir=None)
    config.validate(spec_of(env_id, config.env.num_envs))


def test_unknown_agents_and_settings_are_refused_naming_the_known_ones():
    with pytest.raises(
        ValueError,
        match="^unknown agent 'a2c'; available: bc, cql, dqn, impala, iql, ppo, r2d2, sac, or module:BuilderClass for a builder of your own$",
    ):
        get_builder("a2c")
    with pytest.raises(ValueError, match="^unknown agent 'a2c'; available:"):
        config_class("a2c")
    with pytest.raises(ValueError, match="^unknown agent 'a2c'; available:"):
        presets("a2c")
    with pytest.raises(ValueError, match=r"^unknown dqn setting\(s\) learning_rat, nope; known: .*learning_rate"):
        get_builder("dqn", nope=1, learning_rat=1e-3)


# --- every preset


def test_every_agent_has_a_classic_preset_and_help_lists_them_all():
    assert {p.agent for p in PRESETS if p.family == "classic"} == set(registered_agents())
    listed = describe_presets()
    assert all(f"{agent}: " in listed for agent in registered_agents())
    assert all(p.family in listed.split(f"{p.agent}: ", 1)[1].split(";")[0] for p in PRESETS)
    names = [p.name for p in PRESETS]
    assert len(names) == len(set(names)), "two presets of one agent for one family"


@pytest.mark.parametrize("preset", PRESETS, ids=[p.name for p in PRESETS])
def test_a_presets_fields_exist(preset):
    agent_fields = {f.name for f in dataclasses.fields(config_class(preset.agent))}
    assert not set(preset.settings) - agent_fields, f"{preset.name}: not {preset.agent} settings"
    assert not set(preset.experiment) - EXPERIMENT_FIELDS, f"{preset.name}: not ExperimentConfig fields"
    assert preset.source and preset.name == f"{preset.agent}/{preset.family}"


@pytest.mark.parametrize("preset", PRESETS, ids=[p.name for p in PRESETS])
def test_a_preset_is_chosen_for_its_family_resolves_to_what_it_names_and_validates(preset):
    if preset.family in EXTRAS:
        pytest.importorskip(EXTRAS[preset.family])
    env_id = env_for(preset.agent, preset.family)
    assert task_family(env_id) == preset.family
    assert find_preset(preset.agent, env_id) == preset  # "auto": the env's family
    assert (
        find_preset(preset.agent, "CartPole-v1", preset.name)
        == preset
        == find_preset(preset.agent, "CartPole-v1", preset.family)
    )
    config = experiment_config(preset.agent, env_id)
    assert config.preset == preset.name
    for key, value in preset.settings.items():
        assert getattr(config.builder.config, key) == value, key
    for key, value in preset.experiment.items():
        assert config.flat()[key] == value, key
    config = config.replace(run_dir=None)
    config.validate(spec_of(env_id, config.env.num_envs))


def test_none_keeps_the_plain_defaults():
    assert find_preset("ppo", "HalfCheetah-v5", "none") is None and find_preset("ppo", "HalfCheetah-v5", None) is None
    config = experiment_config("ppo", "HalfCheetah-v5", None)
    assert config.preset is None and config.builder.config == config_class("ppo")()
    assert task_family("my_package.nowhere:NoSuchEnv-v0") is None and task_family("NoSuchEnv-v0") is None
