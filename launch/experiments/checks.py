"""What an ``ExperimentConfig`` checks before a run starts: its settings (no env needed), then
the agent against the env's spec. Each raises a one-line ``ValueError`` naming the first bad
setting; the runners call both before any process, file or server starts. And what a config
adds for a PettingZoo env (``shoal.envs.multiagent``, ``shoal.envs.selfplay``): its settings
checked against the env, and its networks per group of agents or with a centralised critic."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import jax

from shoal.agents.components.groups import group_networks
from shoal.agents.components.networks import check_critic_only
from shoal.agents.learner_memory import check_learner_fits
from shoal.core.environment_variables import check_environment
from shoal.core.settings import check_settings
from shoal.core.specs import EnvironmentSpec
from shoal.envs import check_env_id
from shoal.envs.env_sources import check_env_args, load_env_factory
from shoal.envs.environments import is_atari, resolve_env_id
from shoal.envs.jax_envs import is_jax_env
from shoal.envs.multiagent import GLOBAL_STATE, env_maker, is_pettingzoo, policy_groups
from shoal.envs.video import check_video_extra
from shoal.launch.experiments.callbacks import check_callbacks
from shoal.launch.experiments.config_groups import FLAT_NAMES, GROUPS
from shoal.launch.experiments.trackers import check_backend


def check_experiment_settings(config: Any) -> None:
    """The ``SHOAL_*`` environment variables, the replay backend, the callbacks, the env id (or
    factory) and its arguments, every field against its range, the multi-agent settings, and
    the extras that videos and tracking need."""
    check_environment()
    config.replay_backend()
    check_callbacks(config.callbacks)
    if config.env.factory is not None:
        load_env_factory(config.env.factory)
    elif is_pettingzoo(config.env.id):
        env_maker(config.env.id, config.env.args if isinstance(config.env.args, Mapping) else None)  # (args checked)
    else:
        check_env_id(config.env.id)
        if config.env.args and not is_atari(config.env.id) and not is_jax_env(config.env.id):  # (JAX: params)
            check_env_args(resolve_env_id(config.env.id), config.env.args)
    if not isinstance(config.env.args, Mapping) or not all(isinstance(k, str) for k in config.env.args):
        raise ValueError(f"env_args must be a dict of keyword arguments, got {config.env.args!r}")
    for name in GROUPS:  # (each field named as its flag and config.json v1 name it: eval_every, not every)
        check_settings(
            getattr(config, name), names={field: flat for (group, field), flat in FLAT_NAMES.items() if group == name}
        )
    config.agent_group_indices()
    if config.run.dataset is not None:
        from shoal.launch.experiments.offline import check_dataset_settings  # lazy: minari's reader, for datasets only

        check_dataset_settings(config)  # (an agent that cannot use --dataset)
    if config.run.record_dataset is not None:
        from shoal.launch.experiments.formats.minari_recording import check_record_dataset  # lazy: minari

        check_record_dataset(config)
    warn_of_a_target_out_of_reach(config)
    if config.tracking.video_every:
        check_video_extra()
    if config.tracking.tracker is not None:
        check_backend(config.tracking.tracker)
        if not config.run.dir:
            raise ValueError(
                f"track={config.tracking.tracker!r} needs a run directory (the tracker sends the logs "
                "its nodes write there); give run_dir"
            )


def check_experiment_agent(config: Any, spec: EnvironmentSpec, check_memory: bool = True) -> None:
    """The agent against the env (``spec``): its settings (the builder's ``validate``), a
    feed-forward policy for self-play, whether its learner fits in memory (``check_memory``;
    ``shoal.agents.learner_memory``), and whether the step budget reaches its first update."""
    builder = config.builder
    builder.validate(spec, jax.local_device_count())
    if (
        config.multiagent.self_play
        and builder.make_policy(config.make_networks(spec), spec, False).initial_state is not None
    ):
        raise ValueError(
            f"--self-play takes a feed-forward policy (its snapshots act without a recurrent "
            f"state); {builder.name}'s is recurrent"
        )
    if check_memory:
        check_learner_fits(builder, spec, config.make_networks(spec), jax.local_device_count())
    needed = builder.env_steps_before_learning(spec)
    if config.run.max_env_steps < needed:
        raise ValueError(
            f"max_env_steps={config.run.max_env_steps} is below the {needed} env steps "
            f"{builder.name} takes before its first update (see its replay or "
            "rollout settings): the run could not learn"
        )


def warn_of_a_target_out_of_reach(config: Any) -> None:
    """One warning line when the target is the env's ``reward_threshold`` (set for its
    registered episode limit) but ``--env-arg max_episode_steps`` cuts episodes shorter: the
    run may never reach it and spend its whole budget."""
    limit = config.env.args.get("max_episode_steps") if isinstance(config.env.args, Mapping) else None
    if (
        config.evaluation.target_return is not None
        or config.env.factory is not None
        or not isinstance(limit, int)
        or is_pettingzoo(config.env.id)
        or is_jax_env(config.env.id)
    ):
        return
    registered = gym.spec(resolve_env_id(config.env.id))
    if (
        registered.reward_threshold is not None
        and registered.max_episode_steps
        and limit < registered.max_episode_steps
    ):
        print(
            f"shoal: warning: the target return {registered.reward_threshold:g} is {config.env.id}'s "
            f"reward_threshold for episodes of up to {registered.max_episode_steps} steps; with "
            f"max_episode_steps={limit} it may be out of reach (set --target-return)",
            file=sys.stderr,
            flush=True,
        )


def agent_groups(config: Any) -> tuple[list[str], list[int]] | None:
    """``config.multiagent.agent_groups`` resolved against the env's agents: the groups' names and each
    agent's group (``shoal.envs.multiagent.policy_groups``), or ``None`` (one shared policy).
    A one-line ``ValueError`` for multi-agent settings the env or each other rule out."""
    if not is_pettingzoo(config.env.id) or config.env.factory is not None:
        jaxmarl = config.env.id.startswith("jaxmarl:") and config.env.factory is None  # (its rows: a global state)
        global_state = config.multiagent.global_state and not jaxmarl
        if config.multiagent.agent_groups or global_state or config.multiagent.self_play:
            flag = (
                "agent groups (--agent-group)"
                if config.multiagent.agent_groups
                else "--global-state"
                if global_state
                else "--self-play"
            )
            envs = (
                "a PettingZoo or JaxMARL env (pettingzoo:<module>, jaxmarl:<Name>)"
                if flag == "--global-state"
                else "a PettingZoo env (pettingzoo:<module>)"
            )
            raise ValueError(f"{flag}: for {envs} only, not {config.env.id}")
        return None
    if config.multiagent.self_play:
        if config.multiagent.agent_groups or config.multiagent.global_state:
            raise ValueError(
                "--self-play plays one policy against its own snapshots: drop "
                + ("--agent-group" if config.multiagent.agent_groups else "--global-state")
            )
        env_maker(config.env.id, config.env.args, turns=True)().close()  # (a turn-based game, or one line)
        return None
    if config.multiagent.agent_groups and not config.multiagent.agent_ids:
        raise ValueError("agent groups (--agent-group) read each row's agent from its identity: drop --no-agent-ids")
    groups = policy_groups(config.env.id, config.env.args, config.multiagent.agent_groups)  # (spaces checked: one line)
    return groups if config.multiagent.agent_groups else None


def multiagent_networks(config: Any, networks: Any, spec: EnvironmentSpec) -> Any:
    """``networks`` as ``config`` runs them: checked to read the global state in their critic
    only (``global_state``), one copy per group of agents (``agent_groups``)."""
    if config.multiagent.global_state:
        check_critic_only(networks, GLOBAL_STATE, config.builder.name)
    groups = agent_groups(config)
    if groups is None:
        return networks
    return group_networks(networks, groups[1], len(groups[0]), "key" if spec.dict_observations else "tail")
