"""``ExperimentConfig``: everything a run needs, the single input of both runners."""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable, Mapping
from typing import Any

import gymnasium as gym
import jax

from shoal.agents import get_builder
from shoal.agents.builders import AgentBuilder
from shoal.agents.presets import find_preset
from shoal.agents.registry import agent_name, config_class
from shoal.core.specs import EnvironmentSpec
from shoal.envs import environment_spec, make_vector_env
from shoal.envs.env_sources import factory_path
from shoal.envs.environments import resolve_env_id
from shoal.envs.jax_envs import is_jax_env, reward_threshold
from shoal.envs.multiagent import is_pettingzoo
from shoal.launch.experiments.checks import (
    agent_groups,
    check_experiment_agent,
    check_experiment_settings,
    multiagent_networks,
)
from shoal.launch.experiments.config_groups import (
    FLAT_FIELDS,
    GROUPS,
    EnvConfig,
    EvaluationConfig,
    MultiAgentConfig,
    ReplayConfig,
    RunConfig,
    TrackingConfig,
    split_flat,
)
from shoal.launch.experiments.run_directory.config_record import SCHEMA_VERSION, grouped_record, record_version
from shoal.replay.backends import check_backend

__all__ = [
    "ExperimentConfig",
    "EnvConfig",
    "RunConfig",
    "EvaluationConfig",
    "ReplayConfig",
    "TrackingConfig",
    "MultiAgentConfig",
    "config_from_dict",
    "experiment_config",
]


@dataclasses.dataclass
class ExperimentConfig:
    """Everything a run needs; the single input of both runners. Its settings are in groups
    (``shoal.launch.experiments.config_groups``; ``docs/configuration.md`` has the table):

        ExperimentConfig(builder=get_builder("dqn"), env=EnvConfig("CartPole-v1", num_envs=8),
                         run=RunConfig(seed=1, max_env_steps=50_000, dir="runs/dqn-cartpole"),
                         evaluation=EvaluationConfig(every=5_000))

    ``ExperimentConfig.from_flat(builder, env_id=..., max_env_steps=...)`` builds one from the
    flat names (``config.json`` v1's, the presets' and the flags'), ``replace(**flat)`` a copy.

    Attributes:
      builder: the agent (e.g. ``shoal.agents.get_builder("dqn")``).
      env: the environment and how an actor steps it (``EnvConfig``).
      run: seed, step budget, run directory, checkpoints, resume (``RunConfig``).
      evaluation: how often, how many episodes, the target return (``EvaluationConfig``).
      replay: the replay backend (``ReplayConfig``).
      tracking: progress lines, a tracking server, videos (``TrackingConfig``).
      multiagent: a PettingZoo env's agents: identities, groups, global state, self-play
        (``MultiAgentConfig``).
      network_factory: ``spec -> networks``; ``None`` uses ``builder.make_networks``.
      preset: the name of the preset the settings came from (``shoal.agents.presets``; recorded
        in ``config.json``), if any. ``experiment_config`` builds a config from one.
      callbacks: objects whose ``on_evaluation(evaluation)`` (after each evaluation; ``True``
        ends the run) and ``on_end(result)`` the run calls, in the process that evaluates
        (``shoal.launch.experiments.callbacks``). Not recorded in ``config.json``.

    How a distributed run is launched is its own group, ``LaunchSettings``
    (``shoal.launch.experiments.distributed.settings``), given beside the config to
    ``run_distributed_experiment`` and recorded as ``config.json``'s ``launch``.
    """

    builder: AgentBuilder
    env: EnvConfig
    run: RunConfig = dataclasses.field(default_factory=RunConfig)
    evaluation: EvaluationConfig = dataclasses.field(default_factory=EvaluationConfig)
    replay: ReplayConfig = dataclasses.field(default_factory=ReplayConfig)
    tracking: TrackingConfig = dataclasses.field(default_factory=TrackingConfig)
    multiagent: MultiAgentConfig = dataclasses.field(default_factory=MultiAgentConfig)
    network_factory: Callable[[EnvironmentSpec], Any] | None = None
    preset: str | None = None
    callbacks: list[Any] = dataclasses.field(default_factory=list)

    def __post_init__(self) -> None:
        for name, kind in GROUPS.items():  # (a group given as something else: one line, not an AttributeError later)
            if not isinstance(getattr(self, name), kind):
                raise TypeError(f"ExperimentConfig.{name} must be of type {kind.__name__}, got {getattr(self, name)!r}")
        # The agent for this run's budget (``AgentBuilder.for_budget``: e.g. PPO's schedules
        # decay over ``max_env_steps`` where the config leaves their horizon unset); the
        # builder the caller gave is not changed.
        if isinstance(self.run.max_env_steps, int) and hasattr(self.builder, "for_budget"):
            self.builder = self.builder.for_budget(self.run.max_env_steps)

    @classmethod
    def from_flat(cls, builder: AgentBuilder, **flat: Any) -> ExperimentConfig:
        """The config whose settings ``flat`` gives by flat name (``env_id``, ``num_envs``,
        ``max_env_steps``, ``run_dir``, ``eval_every``, ...: ``config_groups.FLAT_FIELDS``); a
        one-line ``ValueError`` for a name that is none of them."""
        groups, top = split_flat(flat)
        if "env" not in groups or "id" not in groups["env"]:
            raise ValueError("an experiment needs its env_id")
        return cls(builder=builder, **{name: GROUPS[name](**fields) for name, fields in groups.items()}, **top)

    def replace(self, **flat: Any) -> ExperimentConfig:
        """A copy with the settings ``flat`` names (flat names, as ``from_flat``) changed."""
        groups, top = split_flat(flat)
        return dataclasses.replace(
            self, **{name: dataclasses.replace(getattr(self, name), **fields) for name, fields in groups.items()}, **top
        )

    def flat(self) -> dict[str, Any]:
        """Every setting by its flat name (``config_groups.FLAT_FIELDS``; not the builder)."""
        return {
            name: getattr(self if group is None else getattr(self, group), field)
            for name, (group, field) in FLAT_FIELDS.items()
        }

    def resolved_target_return(self) -> float | None:
        if self.evaluation.target_return is not None:
            return self.evaluation.target_return
        if self.env.factory is not None or is_pettingzoo(self.env.id):
            return None
        if is_jax_env(self.env.id):  # (gymnax's ports of gymnasium's envs: gymnasium's threshold)
            return reward_threshold(self.env.id)
        return gym.spec(resolve_env_id(self.env.id)).reward_threshold

    def validate(self, spec: EnvironmentSpec | None = None, check_memory: bool = True) -> None:
        """Raises ``ValueError`` naming the first bad setting: ``validate_settings``, then with
        ``spec`` also ``validate_agent``. (A runner calls the two itself, once each, with the
        env built between them: this is the one call for a caller that holds a spec.)"""
        self.validate_settings()
        if spec is not None:
            self.validate_agent(spec, check_memory)

    def validate_settings(self) -> None:
        """What needs no environment: the ``SHOAL_*`` environment variables, the env id, and
        every field against its range (so that building the env is safe;
        ``shoal.launch.experiments.checks``)."""
        check_experiment_settings(self)

    def validate_agent(self, spec: EnvironmentSpec, check_memory: bool = True) -> None:
        """The agent against the env (``spec``): its settings (the builder's ``validate``),
        whether the step budget lets it learn, and (``check_memory``: the learner runs on this
        machine) whether its learner fits in memory (estimated from shapes, nothing allocated:
        ``shoal.agents.learner_memory``)."""
        check_experiment_agent(self, spec, check_memory)

    def replay_backend(self) -> str:
        """The replay backend this run uses (``replay.backend``, or this Python's default); a
        one-line ``ValueError`` if it cannot run here."""
        return check_backend(self.replay.backend)

    def make_env(self, num_envs: int, seed: int, evaluation: bool = False):
        """A vector env of ``env.id`` as this experiment runs it (for training, or evaluation)."""
        env, agents = self.env, self.multiagent
        return make_vector_env(
            env.id,
            num_envs,
            seed,
            sticky_actions=env.sticky_actions,
            evaluation=evaluation,
            clip_rewards=env.clip_rewards,
            env_args=env.args,
            env_factory=env.factory,
            action_masks=env.action_masks,
            agent_ids=agents.agent_ids,
            global_state=agents.global_state,
            self_play=agents.self_play,
        )

    def environment_spec(self) -> EnvironmentSpec:
        """The spec of this experiment's vector env (``env.num_envs`` copies of ``env.id``), read
        off one single env built and closed, never reset (``actors.environment_spec``: no
        vector env): a driver that steps no env calls this once and hands the spec (a small
        picklable dataclass) to the nodes."""
        env, agents = self.env, self.multiagent
        return environment_spec(
            env.id,
            env.num_envs,
            env.args,
            env.factory,
            env.action_masks,
            agents.agent_ids,
            agents.global_state,
            agents.self_play,
        )

    def agent_group_indices(self) -> tuple[list[str], list[int]] | None:
        """``multiagent.agent_groups`` resolved against the env's agents, or ``None`` (one
        shared policy); a one-line ``ValueError`` for multi-agent settings the env rules out
        (``shoal.launch.experiments.checks``)."""
        return agent_groups(self)

    def make_networks(self, spec: EnvironmentSpec) -> Any:
        """The agent's networks (``network_factory``'s or the builder's), one copy per group of
        agents with ``agent_groups`` (``shoal.agents.components.groups``)."""
        return multiagent_networks(self, (self.network_factory or self.builder.make_networks)(spec), spec)

    def to_dict(self) -> dict[str, Any]:
        """What ``config.json`` records (schema version 2, ``config_record``): each group as an
        object (``run.resume`` left out), the env factory as its path, the backend this run
        uses, the preset, the agent and its settings, the resolved target and the devices."""
        groups = {name: dataclasses.asdict(getattr(self, name)) for name in GROUPS}
        del groups["run"]["resume"]
        groups["env"]["factory"] = factory_path(self.env.factory)
        groups["replay"]["backend"] = self.replay_backend()
        return {
            "schema_version": SCHEMA_VERSION,
            **groups,
            "preset": self.preset,
            "resolved_target_return": self.resolved_target_return(),
            "agent": agent_name(self.builder),
            "agent_config": dataclasses.asdict(self.builder.config),  # type: ignore[call-overload]  # (a dataclass)
            "jax_devices": [str(d) for d in jax.local_devices()],
        }


def config_from_dict(saved: dict[str, Any], **changes: Any) -> ExperimentConfig:
    """The ``ExperimentConfig`` a run saved in its ``config.json`` (``to_dict``'s, or a record of
    schema version 1: ``config_record``), with ``changes`` (flat names, as ``replace``)."""
    version = record_version("config.json", saved)
    grouped = grouped_record(saved)
    missing = [
        key
        for key, there in (
            ("agent", "agent" in grouped),
            ("agent_config", "agent_config" in grouped),
            ("env_id" if version == 1 else "env.id", isinstance(grouped.get("env"), dict) and "id" in grouped["env"]),
        )
        if not there
    ]
    if missing:
        raise ValueError(f"not the config of a Shoal run (no {', '.join(missing)} in it)")
    hints = typing.get_type_hints(config_class(grouped["agent"]))
    agent = {
        k: tuple(v) if isinstance(v, list) and typing.get_origin(hints.get(k)) is tuple else v
        for k, v in grouped["agent_config"].items()
    }
    groups = {}
    for name, kind in GROUPS.items():
        known = {f.name for f in dataclasses.fields(kind)}
        groups[name] = kind(**{k: v for k, v in (grouped.get(name) or {}).items() if k in known})
    config = ExperimentConfig(builder=get_builder(grouped["agent"], **agent), preset=grouped.get("preset"), **groups)
    return config.replace(**changes) if changes else config


def experiment_config(
    agent: str,
    env_id: str,
    preset: str | None = "auto",
    agent_settings: Mapping[str, Any] | None = None,
    **experiment: Any,
) -> ExperimentConfig:
    """The config of ``agent`` on ``env_id``: the agent's defaults, then a preset's settings
    (``"auto"``: the preset of the env's task family, if the agent has one; a family name; or
    ``None``), then ``agent_settings``; the experiment's settings likewise (the preset's, then
    ``experiment``), by flat name (``max_env_steps``, ``num_envs``, ``eval_every``, ...:
    ``config_groups.FLAT_FIELDS``)."""
    chosen = find_preset(agent, env_id, preset)
    settings = {**(chosen.settings if chosen else {}), **(agent_settings or {})}
    fields = {**(chosen.experiment if chosen else {}), **experiment}
    return ExperimentConfig.from_flat(
        get_builder(agent, **settings), env_id=env_id, preset=chosen.name if chosen else None, **fields
    )
