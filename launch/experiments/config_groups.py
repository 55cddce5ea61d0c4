"""The groups of an ``ExperimentConfig``: frozen dataclasses, one per concern.

    ExperimentConfig(builder=get_builder("dqn"), env=EnvConfig("CartPole-v1", num_envs=8),
                     run=RunConfig(seed=1, max_env_steps=50_000, dir="runs/dqn-cartpole"))

``FLAT_FIELDS`` maps each field's flat name -- the key of a ``config.json`` of schema version 1,
of a preset's ``experiment`` settings and of ``experiment_config``/``ExperimentConfig.from_flat``
keyword arguments, and what ``shoal train``'s flags set -- to its ``(group, field)``. A number
field declares its accepted range (``shoal.core.settings.setting``); an error names it by its
flat name, as the flags and ``config.json`` v1 do.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import gymnasium as gym

from shoal.core.settings import setting
from shoal.envs.environments import STICKY_ACTIONS
from shoal.envs.stepping import check_overlap


@dataclasses.dataclass(frozen=True)
class EnvConfig:
    """The environment and how an actor steps it.

    Attributes:
      id: a registered gymnasium id (``module:EnvId`` imports the module first), a
        ``pettingzoo:<module>`` env, or, with ``factory``, just the env's name in logs.
      num_envs: envs stepped together by an actor (one vector env).
      args: keyword arguments of the env's constructor (``gym.make(id, **args)``;
        ``shoal train --env-arg KEY=VALUE``), or of ``factory``.
      factory: makes each env instead of ``id``'s registration: ``"module:function"`` or a
        callable defined at the top level of an importable module, returning a
        ``gymnasium.Env`` from ``**args``. Recorded in ``config.json`` as its path.
      sticky_actions: Atari: the probability that the emulator repeats the previous action
        (Machado et al., 2018); other envs ignore it.
      clip_rewards: clip training rewards to [-1, 1] (evaluation reports the unclipped return);
        ``None``: for Atari, as its protocol does.
      action_masks: use the env's action masks (``info["action_mask"]``, or an ``action_mask``
        key of a Dict observation; ``shoal.envs.observations``). ``False``: masks are dropped.
      actor_overlap: where an actor's env steps while its adder writes (``shoal.envs.stepping``):
        ``"off"`` (on the actor's thread), ``"thread"`` (a thread: for envs that leave the GIL,
        EnvPool and ale-py's), ``"process"`` (a worker process), or ``"auto"``: by env family,
        for a distributed run's actors (a one-process run steps on its thread); see
        ``docs/benchmarks.md``, "Actors that overlap".
    """

    id: str
    num_envs: int = setting(16, low=1, high=4_096)
    args: dict[str, Any] = dataclasses.field(default_factory=dict)
    factory: str | Callable[..., gym.Env] | None = None
    sticky_actions: float = setting(STICKY_ACTIONS, low=0.0, high=1.0)
    clip_rewards: bool | None = None
    action_masks: bool = True
    actor_overlap: str = "auto"

    def __post_init__(self) -> None:
        check_overlap(self.actor_overlap)


@dataclasses.dataclass(frozen=True)
class MultiAgentConfig:
    """A PettingZoo env's agents (``shoal.envs.multiagent``, ``shoal.envs.selfplay``).

    Attributes:
      agent_ids: each agent's row carries its identity (a one-hot), so that a shared policy
        can act differently per agent.
      agent_groups: a policy per group of agents instead of one shared, from agent-name
        patterns to group names (``{"adversary_*": "red", "agent_*": "blue"}``; each agent in
        exactly one group), each with its own parameters and optimizer state. Empty: one policy.
      global_state: each row also carries the env's global state (``state()``), which an
        actor-critic's value function reads and its policy does not (PPO: MAPPO).
      self_play: a two-player turn-based game (an AEC env): the learner plays one seat of each
        copy against frozen snapshots of itself, one every ``self_play_every`` learner updates,
        the latest ``self_play_pool`` kept; the evaluation reports win rates against a
        one-step lookahead player, a random player and the pool.
    """

    agent_ids: bool = True
    agent_groups: dict[str, str] = dataclasses.field(default_factory=dict)
    global_state: bool = False
    self_play: bool = False
    self_play_pool: int = setting(8, low=1, high=10_000)
    self_play_every: int = setting(20, low=1, high=10**9)


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """The run: its seed, budget and directory.

    Attributes:
      seed: seeds envs (``seed, seed+1, ...``), networks and exploration.
      max_env_steps: step budget, counted over all envs.
      dir: where config, CSV logs, checkpoints and TensorBoard events go (``None``: nowhere).
      checkpoint_every_s: seconds between checkpoints (with a ``dir``); a checkpoint is also
        taken when the run stops on SIGTERM or ends.
      resume: continue the run whose checkpoint is in ``dir`` (its counters, schedules,
        learner, replay and RNG) instead of starting afresh. Not recorded in ``config.json``.
      dataset: a Minari dataset (a local directory) whose episodes fill replay once before
        training: all an offline agent (``bc``, ``cql``) trains on, a seed of replay for an
        online one (``dqn``, ``sac``); ``shoal.launch.experiments.offline``.
      record_dataset: a new directory where every whole episode the run's actor played is
        written as a Minari dataset (one-process runs;
        ``shoal.launch.experiments.formats.minari_recording``).
    """

    seed: int = setting(0, low=0, high=2**31 - 1)
    max_env_steps: int = setting(100_000, low=1, high=10**13)
    dir: str | None = None
    checkpoint_every_s: float = setting(300.0, low=0.0, low_open=True, high=1e7)
    resume: bool = False
    dataset: str | None = None
    record_dataset: str | None = None


@dataclasses.dataclass(frozen=True)
class ReplayConfig:
    """Attributes:
    backend: ``"reverb"`` or ``"native"`` (``shoal.replay.backends``); ``None``: Reverb where it
      is installed (Python 3.11), native elsewhere. ``config.json`` records the backend the run
      used, and a resume keeps it."""

    backend: str | None = None


@dataclasses.dataclass(frozen=True)
class EvaluationConfig:
    """Attributes:
    every: env steps between evaluations.
    episodes: episodes per evaluation (run in parallel, one per env, with the evaluation
      policy, e.g. greedy).
    target_return: stop once an evaluation's mean return reaches it. ``None``: the env's
      registered ``reward_threshold`` (475 for CartPole-v1), if it has one."""

    every: int = setting(2_000, low=1, high=10**13)
    episodes: int = setting(10, low=1, high=10_000)
    target_return: float | None = setting(None, low=-1e15, high=1e15)


@dataclasses.dataclass(frozen=True)
class TrackingConfig:
    """What a run reports besides its CSV logs and TensorBoard events.

    Attributes:
      progress: print a progress line (to stderr) about once per ``progress_every_s``.
      tracker: also send the run's logs, videos and result to a tracking server: ``"wandb"``
        or ``"mlflow"``, each with its extra (``launch.experiments.tracking``; needs a run
        directory). ``None``: no tracking.
      video_every: every this many evaluations (from the first), one more episode of the
        evaluation policy, rendered to ``<run dir>/videos/eval-<env steps>.mp4`` (the ``video``
        extra). 0: no videos.
    """

    progress: bool = True
    progress_every_s: float = setting(2.0, low=0.0, low_open=True, high=1e6)
    tracker: str | None = None
    video_every: int = setting(0, low=0, high=10**9)


GROUPS: dict[str, type] = {
    "env": EnvConfig,
    "multiagent": MultiAgentConfig,
    "run": RunConfig,
    "replay": ReplayConfig,
    "evaluation": EvaluationConfig,
    "tracking": TrackingConfig,
}

# flat name (config.json v1, presets, flags) -> (group, field); None: a field of ExperimentConfig itself
FLAT_FIELDS: dict[str, tuple[str | None, str]] = {
    "env_id": ("env", "id"),
    "num_envs": ("env", "num_envs"),
    "env_args": ("env", "args"),
    "env_factory": ("env", "factory"),
    "sticky_actions": ("env", "sticky_actions"),
    "clip_rewards": ("env", "clip_rewards"),
    "action_masks": ("env", "action_masks"),
    "actor_overlap": ("env", "actor_overlap"),
    **{
        name: ("multiagent", name)
        for name in ("agent_ids", "agent_groups", "global_state", "self_play", "self_play_pool", "self_play_every")
    },
    "seed": ("run", "seed"),
    "max_env_steps": ("run", "max_env_steps"),
    "run_dir": ("run", "dir"),
    "checkpoint_every_s": ("run", "checkpoint_every_s"),
    "resume": ("run", "resume"),
    "dataset": ("run", "dataset"),
    "record_dataset": ("run", "record_dataset"),
    "replay": ("replay", "backend"),
    "eval_every": ("evaluation", "every"),
    "eval_episodes": ("evaluation", "episodes"),
    "target_return": ("evaluation", "target_return"),
    "progress": ("tracking", "progress"),
    "progress_every_s": ("tracking", "progress_every_s"),
    "track": ("tracking", "tracker"),
    "video_every": ("tracking", "video_every"),
    "preset": (None, "preset"),
    "network_factory": (None, "network_factory"),
    "callbacks": (None, "callbacks"),
}
FLAT_NAMES: dict[tuple[str | None, str], str] = {where: flat for flat, where in FLAT_FIELDS.items()}


def split_flat(values: dict[str, Any]) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """``values`` by flat name as ``({group: {field: value}}, {top-level field: value})``; a
    one-line ``ValueError`` naming an unknown name and the known ones."""
    groups: dict[str, dict[str, Any]] = {}
    top: dict[str, Any] = {}
    for name, value in values.items():
        if name not in FLAT_FIELDS:
            raise ValueError(f"unknown experiment setting {name!r}; known: {', '.join(sorted(FLAT_FIELDS))}")
        group, field = FLAT_FIELDS[name]
        if group is None:
            top[field] = value
        else:
            groups.setdefault(group, {})[field] = value
    return groups, top
