"""Replay filled once from a dataset's episodes, with the agent's own adder (the package's
docstring, "Filling")."""

from __future__ import annotations

from typing import Any, cast

import numpy as np

from shoal.agents.transition_replay import TransitionReplayBuilder
from shoal.core.specs import EnvironmentSpec
from shoal.core.types import Step
from shoal.launch.experiments.formats.minari_reading import Episodes, read_dataset

ON_POLICY_REFUSAL = (
    "learns from its own rollouts or sequences (on-policy: ppo, impala; r2d2: with its recurrent state), which "
    "a dataset does not hold: --dataset seeds replay for dqn or sac, or trains bc, cql or iql"
)


def is_offline(builder: Any) -> bool:
    """Whether ``builder``'s agent trains from a dataset only (no actors)."""
    return bool(getattr(builder, "offline", False))


def require_dataset(config: Any) -> None:
    """One line for an offline agent's run without a dataset (a config of one is otherwise valid:
    ``validate`` checks the settings, a run needs the data)."""
    if config.run.dataset is None and is_offline(config.builder):
        name = getattr(config.builder, "name", type(config.builder).__name__)
        raise ValueError(f"agent {name!r} trains offline, from a dataset: give --dataset PATH (a Minari dataset)")


def check_dataset_settings(config: Any) -> None:
    """One line for a ``--dataset`` an agent cannot use."""
    builder, dataset = config.builder, config.run.dataset
    name = getattr(builder, "name", type(builder).__name__)
    if dataset is not None and not (is_offline(builder) or isinstance(builder, TransitionReplayBuilder)):
        raise ValueError(f"--dataset {dataset!r}: agent {name!r} {ON_POLICY_REFUSAL}")


def load_dataset(config: Any, env: Any, spec: EnvironmentSpec) -> Episodes:
    """The run's dataset, checked against ``env`` (one line, before anything is written); for an
    offline agent, also that it fits in replay."""
    if config.builder.extras_spec(spec):
        raise ValueError(
            f"--dataset {config.run.dataset!r}: agent {config.builder.name!r} stores what its policy records "
            f"({', '.join(config.builder.extras_spec(spec))}) with each step, which no dataset holds"
        )
    episodes = read_dataset(cast(str, config.run.dataset), env.single_observation_space, env.single_action_space)
    capacity = getattr(config.builder.config, "max_replay_size", None)
    if is_offline(config.builder) and capacity is not None and episodes.num_steps > capacity:
        raise ValueError(
            f"--dataset {config.run.dataset!r} holds {episodes.num_steps:,} steps, more than max_replay_size="
            f"{capacity:,}: --set max_replay_size={episodes.num_steps} (an offline agent trains on all of it)"
        )
    return episodes


def _rows(value: Any, index: np.ndarray) -> Any:
    return {key: v[index] for key, v in value.items()} if isinstance(value, dict) else value[index]


def fill_replay(builder: Any, client: Any, spec: EnvironmentSpec, episodes: Episodes) -> dict[str, Any]:
    """Writes ``episodes`` into replay through a fresh adder of ``builder`` (module docstring);
    returns the counts the run reports."""
    lanes = spec.num_envs
    length = episodes.num_steps // lanes
    if length < 1:
        raise ValueError(
            f"the dataset holds {episodes.num_steps} steps, fewer than the {lanes} envs replay items are made "
            "of: --num-envs smaller"
        )
    adder = builder.make_adder(client, spec)
    starts = np.arange(lanes) * length
    try:
        for t in range(length):
            index = starts + t
            adder.add(
                Step(
                    _rows(episodes.observation, index),
                    episodes.action[index],
                    episodes.reward[index],
                    episodes.terminated[index],
                    episodes.truncated[index],
                    _rows(episodes.next_observation, index),
                    {},
                )
            )
        adder.flush()
    finally:
        adder.close()
    n_step = int(getattr(builder.config, "n_step", 1))
    transitions = lanes * max(0, length - (n_step - 1))
    return {
        "episodes": episodes.num_episodes,
        "steps": episodes.num_steps,
        "transitions": transitions,
        "return": {
            "mean": round(float(episodes.returns.mean()), 3),
            "quantiles": [round(float(q), 3) for q in np.quantile(episodes.returns, [0, 0.25, 0.5, 0.75, 1])],
        },
    }


__all__ = ["check_dataset_settings", "fill_replay", "is_offline", "load_dataset", "require_dataset"]
