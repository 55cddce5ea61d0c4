"""Everything a training run's actor saw, as a Minari dataset (``shoal train ... --record-dataset DIR``).

``DatasetRecorder`` wraps the run's adder: each vector step goes on to the adder unchanged, and
each env's episode is kept as it plays (observations, the actions the actor took -- exploring as
it trained --, rewards as the learner sees them, terminations, truncations). An episode that ends
is written at once (every ``FLUSH_EPISODES`` episodes) into a Minari storage in a staging
directory beside ``DIR``, so memory holds only the episodes in progress; ``finish`` (the run's
end, a stop by signal too) writes the metadata and renames the staging directory to ``DIR``.
Episodes still in progress at the end are left out: the dataset holds whole episodes, numbered
in the order they ended. A run that fails leaves nothing behind (``discard``).

The dataset is the one ``shoal record`` writes (``formats.minari_writing``: the env spec where
gymnasium can remake the env, images as they are on minari >= 0.5.4) and what ``--dataset``
reads back::

    shoal train --agent dqn --env CartPole-v1 --record-dataset data/cartpole-dqn-replay
    shoal train --agent cql --env CartPole-v1 --dataset data/cartpole-dqn-replay

It records a one-process run (the runner's one actor); a distributed program's actors, an
Anakin run and an offline agent (it has no actor) are refused in one line before anything starts,
and so are envs with many agents as rows. A resumed run records from its resumption on, into a
new ``DIR``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any

import numpy as np

from shoal.agents.registry import agent_name
from shoal.core.interfaces import Adder
from shoal.core.types import Step
from shoal.launch.experiments.formats.minari_writing import (
    Episode,
    check_images,
    check_out,
    default_dataset_id,
    env_row,
    env_spec,
    new_storage,
    require_minari,
)

FLUSH_EPISODES = 64  # ended episodes kept in memory before they are written to the storage


def check_record_dataset(config: Any) -> None:
    """Refuses (one-line ``ValueError``) a ``--record-dataset`` this run cannot write: the extra
    missing, a path that exists (or whose parent does not, or inside a run directory), an
    offline agent (no actor plays)."""
    out = config.run.record_dataset
    if out is None:
        return
    require_minari("--record-dataset")
    if getattr(config.builder, "offline", False):
        raise ValueError(
            f"--record-dataset records the episodes an actor plays; {agent_name(config.builder)} trains offline "
            "on --dataset, with no actor (record a trained policy with shoal record)"
        )
    check_out(config.run.dir, out, flag="--record-dataset", writer="shoal train --record-dataset")


def check_recorded_env(config: Any, env: Any, num_envs: int | None = None) -> None:
    """Refuses (one line) the run's vector ``env`` where its episodes cannot be recorded: agents
    as rows (more rows than ``num_envs``, by default the config's), or images that this minari
    would store as JPEG. The runner calls it as soon as the env is made, before the run
    directory is written."""
    num_envs = config.env.num_envs if num_envs is None else num_envs
    if getattr(env, "num_envs", num_envs) != num_envs:
        raise ValueError(f"--record-dataset records single-agent envs' episodes; {config.env.id} has many agents")
    check_images(env.single_observation_space, config.env.id)


class DatasetRecorder(Adder):
    """An adder that forwards every vector step to ``adder`` and records each env's episodes as a
    Minari dataset at ``out`` (module docstring). ``env`` is the run's vector env (its spaces)."""

    def __init__(self, adder: Adder, config: Any, env: Any, num_envs: int) -> None:
        minari = require_minari("--record-dataset")
        self._adder, self._config, self._out = adder, config, config.run.record_dataset
        self._observation_space, self._action_space = env.single_observation_space, env.single_action_space
        check_recorded_env(config, env, num_envs)
        self._minari_version = minari.__version__
        self._spec = env_spec(config, self._observation_space, self._action_space)
        parent = os.path.dirname(os.path.abspath(self._out))
        self._staging: str | None = tempfile.mkdtemp(
            prefix=f".{os.path.basename(os.path.normpath(self._out))}-", dir=parent
        )
        self._storage = new_storage(self._staging, self._observation_space, self._action_space, self._spec)
        self._playing: list[Episode | None] = [None] * num_envs
        self._ended: list[Episode] = []
        self._episodes = self._steps = 0
        self._returns: list[float] = []

    def add(self, step: Step) -> None:
        self._adder.add(step)
        ended = np.asarray(step.terminated) | np.asarray(step.truncated)
        for i, episode in enumerate(self._playing):
            if episode is None:
                episode = self._playing[i] = Episode(env_row(step.observation, i))
            episode.actions.append(np.asarray(step.action[i]))
            episode.rewards.append(float(step.reward[i]))
            episode.terminations.append(bool(step.terminated[i]))
            episode.truncations.append(bool(step.truncated[i]))
            episode.observations.append(env_row(step.next_observation, i))  # (the final one where it ended)
            if ended[i]:
                self._ended.append(episode)
                self._playing[i] = None
        if len(self._ended) >= FLUSH_EPISODES:
            self._write_ended()

    def _write_ended(self) -> None:
        first = self._episodes
        self._storage.update_episodes(episode.buffer(first + k, None) for k, episode in enumerate(self._ended))
        self._episodes += len(self._ended)
        self._steps += sum(len(episode.rewards) for episode in self._ended)
        self._returns.extend(sum(episode.rewards) for episode in self._ended)
        self._ended = []

    def flush(self) -> None:
        self._adder.flush()

    def send_pending(self) -> None:
        self._adder.send_pending()

    def close(self, timeout_s: float | None = None) -> bool:
        return self._adder.close(timeout_s)

    def finish(self) -> dict[str, Any]:
        """Writes the episodes that ended and the metadata, moves the dataset to ``out``, and
        returns what it wrote (path, counts, returns)."""
        if self._staging is None:
            raise RuntimeError("the dataset was already finished or discarded")
        if os.path.lexists(self._out):  # (made while the run ran: never replaced, the recording kept)
            staging, self._staging = self._staging, None
            raise ValueError(
                f"--record-dataset {self._out!r} appeared while the run ran; the recording is kept in "
                f"{staging} (its data/ is a Minari dataset without its metadata's id): move it where you want it"
            )
        self._write_ended()
        agent = agent_name(self._config.builder)
        dataset_id = default_dataset_id(self._out)
        self._storage.update_metadata(
            {
                "dataset_id": dataset_id,
                "minari_version": self._minari_version,
                "algorithm_name": f"shoal {agent} (training)",
                "description": (
                    f"every whole episode the actor of a Shoal {agent} training run (seed "
                    f"{self._config.run.seed}) played on {self._config.env.id}, exploring as it trained"
                ),
            }
        )
        os.rename(self._staging, self._out)
        self._staging = None
        returns = np.asarray(self._returns)
        return {
            "out": self._out,
            "dataset_id": dataset_id,
            "episodes": self._episodes,
            "steps": self._steps,
            "return": (  # (None where no episode ended)
                {"mean": float(returns.mean()), "min": float(returns.min()), "max": float(returns.max())}
                if len(returns)
                else None
            ),
            "minari": self._minari_version,
        }

    def discard(self) -> None:
        """Removes the staging directory if the dataset was not finished (a run that failed)."""
        if self._staging is not None:
            shutil.rmtree(self._staging, ignore_errors=True)
            self._staging = None


__all__ = ["FLUSH_EPISODES", "DatasetRecorder", "check_record_dataset", "check_recorded_env"]
