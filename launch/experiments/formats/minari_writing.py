"""What both of Shoal's Minari writers share: ``shoal record`` (``minari_dataset``: a trained
policy's episodes) and ``shoal train --record-dataset`` (``minari_recording``: a training run's).

An episode is kept as Minari's ``EpisodeBuffer`` wants it (``T + 1`` observations, the last the
episode's final one, and ``T`` actions, rewards, terminations, truncations); the storage is
Minari's own HDF5 one, with uint8 images stored as they are where this minari can (0.5.4's
``jpeg_encoding=False``; 0.5.3, the newest on the Python 3.11 stack's numpy 1, JPEG-encodes
them, so there image observations are refused in one line); a dataset's directory must be new
and outside every run directory. Minari itself is imported only when one of them runs (the
``offline`` extra).
"""

from __future__ import annotations

import inspect
import os
import re
from typing import Any

import gymnasium as gym
import numpy as np

from shoal.launch.experiments.formats.minari_reading import MINARI_INSTALL
from shoal.launch.experiments.run_directory.directory import is_run_directory


def require_minari(command: str = "shoal record") -> Any:
    """The ``minari`` module, or a one-line ``ValueError`` naming the extra ``command`` needs."""
    try:
        import minari  # lazy: optional extra (offline)
    except ImportError as e:
        raise ValueError(f"{command} needs the offline extra ({e.name} is missing): {MINARI_INSTALL}") from None
    return minari


def check_out(run_dir: str | None, out: str, flag: str = "--out", writer: str = "shoal record") -> None:
    """Refuses (``ValueError``, one line, naming ``flag`` and its ``writer``) an ``out`` that
    exists, whose parent does not, or that lies inside ``run_dir`` or any Shoal run directory
    (links resolved)."""
    parent = os.path.dirname(os.path.abspath(out))
    if os.path.lexists(out):
        raise ValueError(f"{flag} {out!r} exists: {writer} writes a new dataset directory; give a new path")
    if not os.path.isdir(parent):
        raise ValueError(f"{flag} {out!r}: its directory {parent} does not exist")
    own, at = os.path.realpath(run_dir) if run_dir else None, os.path.realpath(parent)
    while True:
        if at == own or is_run_directory(at):
            raise ValueError(f"{flag} {out!r} is inside the run directory {at}: give a path outside it")
        if os.path.dirname(at) == at:
            return
        at = os.path.dirname(at)


def default_dataset_id(out: str) -> str:
    """``out``'s last name, ``-v0`` added where it names no version (``cartpole-dqn`` -> ``cartpole-dqn-v0``)."""
    name = os.path.basename(os.path.normpath(out))
    return name if re.search(r"-v\d+$", name) else f"{name}-v0"


def env_spec(config: Any, observation_space: Any, action_space: Any) -> Any:
    """The gymnasium ``EnvSpec`` of the run's env (its id and env arguments) where making it gives
    the spaces the dataset holds (no wrapper of Shoal's changed them), else ``None``."""
    if config.env.factory is not None:
        return None
    try:
        spec = gym.spec(config.env.id)
    except Exception:  # (an id gymnasium does not know: EnvPool's, PettingZoo's, ...)
        return None
    spec = spec.copy() if hasattr(spec, "copy") else spec
    try:
        env = gym.make(spec, **dict(config.env.args))
    except Exception:
        return None
    try:
        if env.observation_space != observation_space or env.action_space != action_space:
            return None
        return env.spec
    finally:
        env.close()


class Episode:
    """One episode being recorded (``observations`` one more than the rest)."""

    def __init__(self, observation: Any) -> None:
        self.observations: list[Any] = [observation]
        self.actions: list[Any] = []
        self.rewards: list[float] = []
        self.terminations: list[bool] = []
        self.truncations: list[bool] = []

    def buffer(self, episode_id: int, seed: int | None) -> Any:
        from minari.data_collector.episode_buffer import EpisodeBuffer  # lazy: optional extra (offline)

        first = self.observations[0]
        observations = (
            {key: [o[key] for o in self.observations] for key in first}
            if isinstance(first, dict)
            else self.observations
        )
        return EpisodeBuffer(
            id=episode_id,
            seed=seed,
            observations=observations,
            actions=self.actions,
            rewards=self.rewards,
            terminations=self.terminations,
            truncations=self.truncations,
            infos={},
        )


def new_storage(directory: str, observation_space: Any, action_space: Any, spec: Any) -> Any:
    """A Minari storage (HDF5, images as they are where this minari can) in ``directory/data``."""
    from minari.dataset.minari_storage import MinariStorage  # lazy: optional extra (offline)

    lossless = {"jpeg_encoding": False} if _lossless_images() else {}
    os.makedirs(os.path.join(directory, "data"))
    return MinariStorage.new(
        os.path.join(directory, "data"),
        observation_space=observation_space,
        action_space=action_space,
        env_spec=spec,
        data_format="hdf5",
        **lossless,
    )


def check_images(observation_space: Any, env_id: str) -> None:
    """Refuses (one line) image observations where this minari would store them as JPEG."""
    if _has_images(observation_space) and not _lossless_images():
        import minari  # lazy: optional extra (offline)

        raise ValueError(
            f"minari {minari.__version__} stores uint8 images as JPEG (lossy, and HxWxC only), and "
            f"{env_id}'s observations hold images: record them with minari >= 0.5.4 (Python 3.12+)"
        )


def _lossless_images() -> bool:
    """Whether this minari stores images as they are when asked (0.5.4's ``jpeg_encoding``)."""
    from minari.dataset.minari_storage import MinariStorage  # lazy: optional extra (offline)

    return "jpeg_encoding" in inspect.signature(MinariStorage.new).parameters


def _has_images(space: Any) -> bool:
    """Whether ``space`` (a Dict's keys too) holds uint8 arrays of rank 2 or 3 (what minari takes for images)."""
    if isinstance(space, gym.spaces.Dict):
        return any(_has_images(value) for value in space.spaces.values())
    return isinstance(space, gym.spaces.Box) and space.dtype == np.uint8 and len(space.shape) in (2, 3)


def env_row(value: Any, i: int) -> Any:
    """Env ``i``'s row of a vector value (an array, or a dict of arrays: each key's row)."""
    return {key: np.asarray(v[i]) for key, v in value.items()} if isinstance(value, dict) else np.asarray(value[i])


__all__ = [
    "Episode",
    "check_images",
    "check_out",
    "default_dataset_id",
    "env_row",
    "env_spec",
    "new_storage",
    "require_minari",
]
