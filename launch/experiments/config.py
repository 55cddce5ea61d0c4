"""``ExperimentConfig``: everything a run needs, the single input of both runners."""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, Callable, Mapping

import gymnasium as gym
import jax

from shoal.actors import environment_spec, make_vector_env
from shoal.actors.env_sources import factory_path
from shoal.actors.environments import STICKY_ACTIONS, resolve_env_id
from shoal.actors.multiagent import is_pettingzoo
from shoal.agents.builders import AgentBuilder
from shoal.agents.registry import agent_name
from shoal.core.settings import setting
from shoal.core.specs import EnvironmentSpec
from shoal.launch.experiments.checks import (agent_groups, check_experiment_agent, check_experiment_settings,
                                             multiagent_networks)


@dataclasses.dataclass
class ExperimentConfig:
    """Everything a run needs; the single input of both runners.

    Attributes:
      builder: the agent (e.g. ``shoal.agents.get_builder("dqn")``).
      env_id: a registered gymnasium id.
      seed: seeds envs (``seed, seed+1, ...``), networks and exploration.
      max_env_steps: step budget, counted over all envs.
      num_envs: envs stepped together by an actor (one vector env).
      eval_every: env steps between evaluations.
      eval_episodes: episodes per evaluation (run in parallel, one per env, with the
        evaluation policy, e.g. greedy).
      target_return: stop once an evaluation's mean return reaches it. ``None``: the env's
        registered ``reward_threshold`` (475 for CartPole-v1), if it has one.
      run_dir: where config, CSV logs, checkpoints and TensorBoard events go (``None``: nowhere).
      checkpoint_every_s: seconds between checkpoints (with a run_dir); a checkpoint is also
        taken when the run stops on SIGTERM or ends.
      resume: continue the run whose checkpoint is in ``run_dir`` (its counters, schedules,
        learner, replay and RNG), instead of starting afresh.
      network_factory: ``spec -> networks``; ``None`` uses ``builder.make_networks``.
      progress: print a progress line (to stderr) about once per ``progress_every_s``.
      preset: the name of the preset the settings came from (``shoal.agents.presets``; recorded
        in ``config.json``), if any. ``experiment_config`` builds a config from one.
      sticky_actions: Atari: the probability that the emulator repeats the previous action
        (Machado et al., 2018); other envs ignore it.
      clip_rewards: clip training rewards to [-1, 1] (evaluation reports the unclipped return);
        ``None``: for Atari, as its protocol does.
      env_args: keyword arguments of the env's constructor (``gym.make(env_id, **env_args)``;
        ``shoal train --env-arg KEY=VALUE``), or of ``env_factory``.
      env_factory: makes each env instead of ``env_id``'s registration: ``"module:function"``
        or a callable defined at the top level of an importable module, returning a
        ``gymnasium.Env`` (with the user's wrappers) from ``**env_args``. ``env_id`` then only
        names the env in logs and results. Recorded in ``config.json`` as its path.
      action_masks: use the env's action masks (``info["action_mask"]``, or an ``action_mask``
        key of a Dict observation; ``shoal.actors.observations``): masked actions are never
        taken. ``False``: masks are dropped, every action may be taken.
      video_every: every this many evaluations (from the first), one more episode of the
        evaluation policy, rendered to ``<run_dir>/videos/eval-<env steps>.mp4`` (the ``video``
        extra; its time is ``video`` in the breakdown). 0 (the default): no videos.
      track: also send the run's logs, videos and result to a tracking server: ``"wandb"``
        (Weights & Biases) or ``"mlflow"``, each with its extra (``launch.experiments.tracking``;
        needs a ``run_dir``). ``None`` (the default): no tracking.
      replay: the replay backend, ``"reverb"`` or ``"native"`` (``shoal.replay.backends``);
        ``None``: Reverb where it is installed (Python 3.11), native elsewhere. ``config.json``
        records the backend the run used, and a resume keeps it.
      agent_ids: a PettingZoo env: each agent's row carries its identity (a one-hot), so that a
        shared policy can act differently per agent (``shoal.actors.multiagent``).
      agent_groups: a PettingZoo env: a policy per group of agents instead of one shared, from
        agent-name patterns to group names (``{"adversary_*": "red", "agent_*": "blue"}``; each
        agent in exactly one group): each group its own parameters and optimizer state
        (``shoal.agents.components.groups``). Empty (the default): one policy for every agent.
      global_state: a PettingZoo env: each row also carries the env's global state (its
        ``state()``), which an actor-critic's value function reads and its policy does not: a
        centralised critic (PPO: MAPPO).
      self_play: a two-player turn-based PettingZoo game (an AEC env): the learner plays one
        seat of each copy against frozen snapshots of itself (``shoal.actors.selfplay``): one
        every ``self_play_every`` learner updates, the latest ``self_play_pool`` kept. The
        evaluation plays a one-step lookahead player and reports win rates against it, a random
        player and the pool. Distributed, the learner node keeps the pool and serves it to the
        actors and the evaluator.
      callbacks: objects whose ``on_evaluation(evaluation)`` (after each evaluation; ``True``
        ends the run) and ``on_end(result)`` the run calls, in the process that evaluates
        (``shoal.launch.experiments.callbacks``). Not recorded in ``config.json``.
    """

    builder: AgentBuilder
    env_id: str
    seed: int = setting(0, low=0, high=2**31 - 1)
    max_env_steps: int = setting(100_000, low=1, high=10**13)
    num_envs: int = setting(16, low=1, high=4_096)
    eval_every: int = setting(2_000, low=1, high=10**13)
    eval_episodes: int = setting(10, low=1, high=10_000)
    target_return: float | None = setting(None, low=-1e15, high=1e15)
    run_dir: str | None = None
    checkpoint_every_s: float = setting(300.0, low=0.0, low_open=True, high=1e7)
    resume: bool = False
    network_factory: Callable[[EnvironmentSpec], Any] | None = None
    progress: bool = True
    progress_every_s: float = setting(2.0, low=0.0, low_open=True, high=1e6)
    preset: str | None = None
    sticky_actions: float = setting(STICKY_ACTIONS, low=0.0, high=1.0)
    clip_rewards: bool | None = None
    env_args: dict[str, Any] = dataclasses.field(default_factory=dict)
    env_factory: str | Callable[..., gym.Env] | None = None
    action_masks: bool = True
    video_every: int = setting(0, low=0, high=10**9)
    track: str | None = None
    replay: str | None = None
    agent_ids: bool = True
    agent_groups: dict[str, str] = dataclasses.field(default_factory=dict)
    global_state: bool = False
    self_play: bool = False
    self_play_pool: int = setting(8, low=1, high=10_000)
    self_play_every: int = setting(20, low=1, high=10**9)
    callbacks: list[Any] = dataclasses.field(default_factory=list)

    def __post_init__(self) -> None:
        # The agent for this run's budget (``AgentBuilder.for_budget``: e.g. PPO's schedules
        # decay over ``max_env_steps`` where the config leaves their horizon unset); the
        # builder the caller gave is not changed.
        if isinstance(self.max_env_steps, int) and hasattr(self.builder, "for_budget"):
            self.builder = self.builder.for_budget(self.max_env_steps)

    def resolved_target_return(self) -> float | None:
        if self.target_return is not None:
            return self.target_return
        if self.env_factory is not None or is_pettingzoo(self.env_id):
            return None
        return gym.spec(resolve_env_id(self.env_id)).reward_threshold

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
        """The replay backend this run uses (``replay``, or this Python's default); a one-line
        ``ValueError`` if it cannot run here."""
        from shoal.replay.backends import check_backend

        return check_backend(self.replay)

    def make_env(self, num_envs: int, seed: int, evaluation: bool = False):
        """A vector env of ``env_id`` as this experiment runs it (for training, or evaluation)."""
        return make_vector_env(self.env_id, num_envs, seed, sticky_actions=self.sticky_actions,
                               evaluation=evaluation, clip_rewards=self.clip_rewards,
                               env_args=self.env_args, env_factory=self.env_factory,
                               action_masks=self.action_masks, agent_ids=self.agent_ids,
                               global_state=self.global_state, self_play=self.self_play)

    def environment_spec(self) -> EnvironmentSpec:
        """The spec of this experiment's vector env (``num_envs`` copies of ``env_id``), read
        off one single env built and closed, never reset (``actors.environment_spec``: no
        vector env): a driver that steps no env calls this once and hands the spec (a small
        picklable dataclass) to the nodes."""
        return environment_spec(self.env_id, self.num_envs, self.env_args, self.env_factory, self.action_masks,
                                self.agent_ids, self.global_state, self.self_play)

    def agent_group_indices(self) -> tuple[list[str], list[int]] | None:
        """``agent_groups`` resolved against the env's agents, or ``None`` (one shared policy);
        a one-line ``ValueError`` for multi-agent settings the env rules out
        (``shoal.launch.experiments.checks``)."""
        return agent_groups(self)

    def make_networks(self, spec: EnvironmentSpec) -> Any:
        """The agent's networks (``network_factory``'s or the builder's), one copy per group of
        agents with ``agent_groups`` (``shoal.agents.components.groups``)."""
        return multiagent_networks(self, (self.network_factory or self.builder.make_networks)(spec), spec)

    def to_dict(self) -> dict[str, Any]:
        return {
            **{f.name: getattr(self, f.name) for f in dataclasses.fields(self)
               if f.name not in ("builder", "network_factory", "resume", "callbacks")},
            "env_factory": factory_path(self.env_factory),
            "replay": self.replay_backend(),
            "resolved_target_return": self.resolved_target_return(),
            "agent": agent_name(self.builder),
            "agent_config": dataclasses.asdict(self.builder.config),
            "jax_devices": [str(d) for d in jax.local_devices()],
        }


def config_from_dict(saved: dict[str, Any], **changes: Any) -> ExperimentConfig:
    """The ``ExperimentConfig`` a run saved with ``to_dict`` (its ``config.json``)."""
    from shoal.agents import get_builder
    from shoal.agents.registry import config_class

    missing = [key for key in ("agent", "agent_config", "env_id") if key not in saved]
    if missing:
        raise ValueError(f"not the config of a Shoal run (no {', '.join(missing)} in it)")
    hints = typing.get_type_hints(config_class(saved["agent"]))
    agent = {k: tuple(v) if isinstance(v, list) and typing.get_origin(hints.get(k)) is tuple else v
             for k, v in saved["agent_config"].items()}
    fields = {f.name for f in dataclasses.fields(ExperimentConfig)} - {"builder", "network_factory", "callbacks"}
    kept = {k: v for k, v in saved.items() if k in fields}
    return ExperimentConfig(builder=get_builder(saved["agent"], **agent), **{**kept, **changes})


def experiment_config(agent: str, env_id: str, preset: str | None = "auto",
                      agent_settings: Mapping[str, Any] | None = None, **experiment: Any) -> ExperimentConfig:
    """The config of ``agent`` on ``env_id``: the agent's defaults, then a preset's settings
    (``"auto"``: the preset of the env's task family, if the agent has one; a family name; or
    ``None``), then ``agent_settings``; the experiment's fields likewise (the preset's, then
    ``experiment``)."""
    from shoal.agents import get_builder
    from shoal.agents.presets import find_preset

    chosen = find_preset(agent, env_id, preset)
    settings = {**(chosen.settings if chosen else {}), **(agent_settings or {})}
    fields = {**(chosen.experiment if chosen else {}), **experiment}
    return ExperimentConfig(builder=get_builder(agent, **settings), env_id=env_id,
                            preset=chosen.name if chosen else None, **fields)
