"""A Minari dataset read for training (``shoal train --dataset PATH``): its episodes as arrays,
checked against the env the run makes, before anything of the run starts.

``PATH`` is a local dataset directory, as ``shoal record`` writes it or as Minari's own
``DataCollector.create_dataset`` does (``DIR`` holding ``data/metadata.json`` and
``data/main_data.hdf5``; ``DIR/data`` is taken too). Only where ``PATH`` is not a directory and
reads as a Minari dataset id (``(namespace/)(env/)name-vN``) is it asked of Minari
(``minari.load_dataset(id, download=True)``: the local ``MINARI_DATASETS_PATH`` first, then
Minari's remote, which is the user's request to download it).

Every failure is one ``ValueError`` line: a path that is no dataset, a file Minari cannot read
(truncated, corrupted), an empty dataset, spaces that differ from the env's, an episode whose
arrays disagree in length.
"""

from __future__ import annotations

import os
import re
from typing import Any, NamedTuple

import numpy as np

# A Minari dataset id (``namespace/name-v0``), and the install line the offline extra needs.
DATASET_ID = re.compile(r"^([A-Za-z0-9_.-]+/){0,2}[A-Za-z0-9_.]+(-[A-Za-z0-9_.]+)*-v\d+$")
MINARI_INSTALL = "pip install 'shoal[offline]'"


class Episodes(NamedTuple):
    """A dataset's episodes, concatenated: step ``t`` is ``observation[t] --action[t]-->
    next_observation[t]``; an episode's last step is ``terminated`` or ``truncated`` (one that
    the dataset ends with neither is marked truncated: its return bootstraps and no step is
    joined to the next episode's)."""

    observation: Any  # [steps, ...] (a dict of arrays for a Dict observation)
    action: np.ndarray
    reward: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    next_observation: Any
    num_episodes: int
    returns: np.ndarray  # [episodes]

    @property
    def num_steps(self) -> int:
        return len(self.reward)


def _require_minari() -> Any:
    try:
        import minari  # lazy: optional extra (offline)
    except ImportError as e:
        raise ValueError(f"--dataset needs the offline extra ({e.name} is missing): {MINARI_INSTALL}") from None
    return minari


def _open(path: str) -> Any:
    """The ``MinariDataset`` at ``path`` (module docstring); one line if it cannot be read."""
    minari = _require_minari()
    if not os.path.isdir(path):
        if os.path.exists(path) or not DATASET_ID.match(path):
            raise ValueError(
                f"--dataset {path!r}: not a dataset directory (a Minari dataset's DIR, holding data/metadata.json, "
                "or a Minari dataset id)"
            )
        try:
            return minari.load_dataset(path, download=True)
        except Exception as e:  # noqa: BLE001 -- minari's own errors, one line
            raise ValueError(f"--dataset {path!r}: Minari could not load it: {_first_line(e)}") from None
    data = path if os.path.isfile(os.path.join(path, "metadata.json")) else os.path.join(path, "data")
    if not os.path.isfile(os.path.join(data, "metadata.json")):
        raise ValueError(f"--dataset {path!r}: no Minari dataset there (no data/metadata.json)")
    try:
        return minari.MinariDataset(data)
    except Exception as e:  # noqa: BLE001 -- a truncated or corrupted file: h5py's, json's, minari's errors
        raise ValueError(f"--dataset {path!r}: cannot read it as a Minari dataset: {_first_line(e)}") from None


def _first_line(e: BaseException) -> str:
    text = str(e).splitlines()[0] if str(e) else ""
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def _concatenate(parts: list[Any]) -> Any:
    if isinstance(parts[0], dict):
        return {key: np.concatenate([p[key] for p in parts]) for key in parts[0]}
    return np.concatenate(parts)


def _slice(observations: Any, start: int, stop: int | None) -> Any:
    if isinstance(observations, dict):
        return {key: np.asarray(value)[start:stop] for key, value in observations.items()}
    return np.asarray(observations)[start:stop]


def _length(observations: Any) -> int:
    return len(next(iter(observations.values()))) if isinstance(observations, dict) else len(observations)


def read_dataset(path: str, observation_space: Any, action_space: Any) -> Episodes:
    """The episodes of the dataset at ``path`` (module docstring), whose observation and action
    spaces must equal ``observation_space`` and ``action_space`` (the env's, one copy's)."""
    dataset = _open(path)
    try:
        spaces = dataset.observation_space, dataset.action_space
        total = int(dataset.total_episodes)
    except Exception as e:  # noqa: BLE001 -- metadata minari cannot make sense of
        raise ValueError(f"--dataset {path!r}: cannot read its metadata: {_first_line(e)}") from None
    if spaces[0] != observation_space or spaces[1] != action_space:
        which = "observation" if spaces[0] != observation_space else "action"
        raise ValueError(
            f"--dataset {path!r}: its {which} space {spaces[0] if which == 'observation' else spaces[1]} "
            f"differs from the env's {observation_space if which == 'observation' else action_space}"
        )
    if total == 0:
        raise ValueError(f"--dataset {path!r}: the dataset holds no episodes")
    parts: dict[str, list[Any]] = {k: [] for k in Episodes._fields[:6]}
    returns = []
    try:
        for episode in dataset.iterate_episodes():
            steps = len(episode.rewards)
            if steps == 0 or _length(episode.observations) != steps + 1 or len(episode.actions) != steps:
                raise ValueError(
                    f"episode {episode.id} holds {_length(episode.observations)} observations, "
                    f"{len(episode.actions)} actions and {steps} rewards (expected T + 1, T and T, T >= 1)"
                )
            terminated = np.asarray(episode.terminations, bool).copy()
            truncated = np.asarray(episode.truncations, bool).copy()
            if not (terminated[-1] or truncated[-1]):
                truncated[-1] = True
            parts["observation"].append(_slice(episode.observations, 0, -1))
            parts["next_observation"].append(_slice(episode.observations, 1, None))
            parts["action"].append(np.asarray(episode.actions))
            parts["reward"].append(np.asarray(episode.rewards, np.float32))
            parts["terminated"].append(terminated)
            parts["truncated"].append(truncated)
            returns.append(float(np.sum(episode.rewards)))
    except Exception as e:  # noqa: BLE001 -- a truncated or corrupted file fails here
        raise ValueError(f"--dataset {path!r}: cannot read its episodes: {_first_line(e)}") from None
    if not returns:
        raise ValueError(f"--dataset {path!r}: the dataset holds no episodes")
    return Episodes(
        **{key: _concatenate(value) for key, value in parts.items()},
        num_episodes=len(returns),
        returns=np.asarray(returns),
    )


__all__ = ["Episodes", "read_dataset"]
