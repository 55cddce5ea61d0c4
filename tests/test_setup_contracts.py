"""The interfaces declare what the code calls, and every registered agent keeps to them; the
launch settings and the CLI's given flags, which the setup path reads, without a run."""

from __future__ import annotations

import dataclasses
import typing

import numpy as np
import pytest

from shoal.agents import get_builder
from shoal.agents.builders import AgentBuilder, AgentConfig
from shoal.agents.registry import config_class, registered_agents
from shoal.agents.transition_replay import TransitionReplayBuilder, TransitionReplayConfig
from shoal.core.specs import make_environment_spec

ENVS = {
    "dqn": "CartPole-v1",
    "ppo": "CartPole-v1",
    "impala": "CartPole-v1",
    "r2d2": "CartPole-v1",
    "sac": "Pendulum-v1",
    "bc": "CartPole-v1",
    "cql": "CartPole-v1",
    "iql": "CartPole-v1",
}


def _spec(env_id: str, num_envs: int = 2):
    from shoal.envs import make_vector_env

    env = make_vector_env(env_id, num_envs, seed=0)
    try:
        return make_environment_spec(env)
    finally:
        env.close()


def _fields(protocol: type) -> set[str]:
    return {
        name
        for klass in protocol.__mro__
        if klass is not typing.Protocol and klass is not object
        for name in getattr(klass, "__annotations__", {})
    }


def test_every_registered_agent_has_the_config_fields_its_builder_reads():
    assert registered_agents() == sorted(ENVS)
    for agent in registered_agents():
        names = {f.name for f in dataclasses.fields(config_class(agent))}
        builder = get_builder(agent)
        wanted = _fields(TransitionReplayConfig if isinstance(builder, TransitionReplayBuilder) else AgentConfig)
        assert wanted <= names, (agent, wanted - names)
    assert _fields(TransitionReplayConfig) > _fields(AgentConfig) == {"variable_update_period"}


@pytest.mark.parametrize("agent", sorted(ENVS))
def test_declared_extras_hold_what_the_acting_policy_records(agent):
    """``extras_spec`` is declared without networks; the policy built from them agrees with it
    (the declared spec may hold more: what the adder adds, e.g. PPO's discounted return)."""
    builder: AgentBuilder = get_builder(agent)
    spec = _spec(ENVS[agent])
    declared = builder.extras_spec(spec)
    policy = builder.make_policy(builder.make_networks(spec), spec, evaluation=False)
    assert {name: declared[name] for name in policy.extras_spec} == dict(policy.extras_spec), (declared, policy)
    # the replay side takes the declared spec (by default), or a Policy as earlier versions passed it
    shapes = lambda batch: {k: np.shape(v) for k, v in batch.data.get("extras", {}).items()}  # noqa: E731
    assert (
        shapes(builder.example_batch(spec))
        == shapes(builder.example_batch(spec, dict(declared)))
        == shapes(builder.example_batch(spec, policy))
    )
    assert set(shapes(builder.example_batch(spec))) == set(declared)


def test_the_actor_a_builder_makes_is_a_training_actor_and_reverb_a_replay_client():
    import jax

    reverb = pytest.importorskip("reverb")

    from shoal.core.interfaces import Actor, TrainingActor, VariableSource
    from shoal.replay.contract import ReplayClient

    class Source(VariableSource):
        def get_variables(self, known_version=-1):
            return 0, None

    builder, spec = get_builder("dqn"), _spec("CartPole-v1")
    policy = builder.make_policy(builder.make_networks(spec), spec, evaluation=False)
    actor = builder.make_actor(jax.random.PRNGKey(0), policy, spec, Source(), asynchronous_updates=False)
    assert isinstance(actor, Actor) and isinstance(actor, TrainingActor)
    assert isinstance(actor.save(), dict) and isinstance(actor.params_version, int)
    assert all(
        hasattr(reverb.Client, name)
        for name in ("server_address", "server_info", "trajectory_writer", "mutate_priorities")
    )
    assert typing.get_type_hints(AgentBuilder.make_dataset_iterator)["replay_client"] is ReplayClient


def test_a_plain_iterator_is_a_typed_dataset():
    from shoal.core.interfaces import Dataset, IteratorDataset, as_dataset
    from shoal.core.types import Sample

    batches = iter([Sample({"x": np.zeros(2)})])
    dataset = as_dataset(batches)
    assert isinstance(dataset, IteratorDataset) and isinstance(dataset, Dataset) and as_dataset(dataset) is dataset
    assert "no replay table" in dataset.table and next(dataset).data["x"].shape == (2,)


def test_launch_settings_go_to_config_json_and_back():
    from shoal.launch.experiments.distributed.settings import LaunchSettings
    from shoal.launch.programs import Resources

    settings = LaunchSettings(
        launcher="ray",
        num_actors=3,
        ray_address="auto",
        ports=(47000, 47099),
        resources={"learner": Resources.parse("num_gpus=1"), "actor": Resources.parse("num_cpus=0.5,host=1")},
        params_via="rpc",
    )
    record = settings.record()
    assert record["ports"] == "47000-47099" and record["resources"] == [
        "learner:num_gpus=1.0",
        "actor:num_cpus=0.5,host=1.0",
    ]
    assert LaunchSettings.from_record(record) == settings
    # a record of an earlier version, without the newer fields: their defaults
    old = LaunchSettings.from_record({"launcher": "processes", "num_actors": 2})
    assert old == LaunchSettings(num_actors=2)
    with pytest.raises(ValueError, match="--num-actors must be an integer in"):
        LaunchSettings(num_actors=0).check("--num-actors")
    with pytest.raises(ValueError, match="params_via must be one of auto, rpc"):
        LaunchSettings(params_via="shm").check()


def test_given_flags_are_the_flags_typed_and_no_others():
    from shoal.launch.experiments.cli.main import given_flags

    assert given_flags(["train"]) == []
    assert sorted(
        given_flags(["train", "--set", "a=1", "--num-envs", "16", "--quiet", "--resources", "learner:num_gpus=1"])
    ) == ["--num-envs", "--quiet", "--resources", "--set"]
    assert given_flags(["train", "--max-env-steps=100000"]) == ["--max-env-steps"]  # (a default value, typed, counts)
