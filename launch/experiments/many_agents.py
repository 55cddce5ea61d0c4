"""What an ``ExperimentConfig`` adds for a PettingZoo env (``shoal.actors.multiagent``,
``shoal.actors.selfplay``): its settings checked against the env, and its networks per group of
agents or with a centralised critic."""

from __future__ import annotations

from typing import Any

from shoal.actors.multiagent import GLOBAL_STATE, env_maker, is_pettingzoo, policy_groups
from shoal.agents.blocks.groups import group_networks
from shoal.agents.blocks.networks import check_critic_only
from shoal.core.specs import EnvironmentSpec


def agent_groups(config: Any) -> tuple[list[str], list[int]] | None:
    """``config.agent_groups`` resolved against the env's agents: the groups' names and each
    agent's group (``shoal.actors.multiagent.policy_groups``), or ``None`` (one shared policy).
    A one-line ``ValueError`` for multi-agent settings the env or each other rule out."""
    if not is_pettingzoo(config.env_id) or config.env_factory is not None:
        if config.agent_groups or config.global_state or config.self_play:
            flag = ("agent groups (--agent-group)" if config.agent_groups else
                    "--global-state" if config.global_state else "--self-play")
            raise ValueError(f"{flag}: for a PettingZoo env (pettingzoo:<module>) only, not {config.env_id}")
        return None
    if config.self_play:
        if config.agent_groups or config.global_state:
            raise ValueError("--self-play plays one policy against its own snapshots: drop "
                             + ("--agent-group" if config.agent_groups else "--global-state"))
        env_maker(config.env_id, config.env_args, turns=True)().close()  # (a turn-based game, or one line)
        return None
    if config.agent_groups and not config.agent_ids:
        raise ValueError("agent groups (--agent-group) read each row's agent from its identity: drop "
                         "--no-agent-ids")
    groups = policy_groups(config.env_id, config.env_args, config.agent_groups)  # (spaces checked: one line)
    return groups if config.agent_groups else None


def multiagent_networks(config: Any, networks: Any, spec: EnvironmentSpec) -> Any:
    """``networks`` as ``config`` runs them: checked to read the global state in their critic
    only (``global_state``), one copy per group of agents (``agent_groups``)."""
    if config.global_state:
        check_critic_only(networks, GLOBAL_STATE, config.builder.name)
    groups = agent_groups(config)
    if groups is None:
        return networks
    return group_networks(networks, groups[1], len(groups[0]), "key" if spec.dict_observations else "tail")
