"""A trained policy's episodes as a Minari dataset (``shoal record RUN_DIR --episodes N --out DIR``).

Minari (Farama's standard for offline RL data) keeps a dataset in a directory ``DIR`` holding
``data/`` (``main_data.hdf5``: one group per episode, and ``metadata.json``: the dataset id,
the observation and action spaces, the env spec, counts). ``record_dataset`` plays ``episodes``
episodes of the run's env (as the run made it for evaluation: its wrappers included, so the
observations are what the policy takes) with the run's policy -- greedy, with ``epsilon`` of
uniformly random actions (allowed ones, where the observation holds an action mask), or
sampling as the actors did (``sample``) -- and writes them there through Minari's own storage,
so that Minari reads them unchanged::

    import minari
    dataset = minari.MinariDataset("DIR/data")                                    # by path
    # or: MINARI_DATASETS_PATH=$(dirname DIR) and minari.load_dataset(basename DIR)

Each episode holds ``T + 1`` observations (the last one the episode's final observation), ``T``
actions, rewards, terminations and truncations. Episodes run ``ENVS_AT_ONCE`` side by side,
started in order until ``episodes`` have started (a copy whose episode ends after that stops
recording), so the dataset is not biased towards short episodes; the envs are reset with
``seed`` (copy ``i``: ``seed + i``), and the policy and the random actions draw from ``seed``
too: the same command writes the same dataset. Images are stored as they are (no JPEG: minari
0.5.4's ``jpeg_encoding=False``; minari 0.5.3, the newest on the Python 3.11 stack's numpy 1,
JPEG-encodes every uint8 image, so there image observations are refused in one line).

``DIR`` must not exist (its parent must), and may not lie in a run directory; the dataset is
written to a fresh directory beside it and renamed to ``DIR`` only once complete: an error
leaves nothing behind.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any

import gymnasium as gym
import numpy as np

from shoal.agents.registry import agent_name
from shoal.launch.experiments.formats.minari_reading import DATASET_ID
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
from shoal.launch.experiments.trained_policy import load_policy

MAX_EPISODES = 1_000_000  # the most episodes one shoal record writes
ENVS_AT_ONCE = 16  # episodes played side by side


def _final(info: dict, i: int) -> Any:
    """Row ``i``'s final observation (Shoal's vector envs reset in the same step: gymnasium's
    ``SAME_STEP`` autoreset puts it in ``info["final_obs"]``, an array of rows or a dict of arrays)."""
    final = info["final_obs"]
    if isinstance(final, dict):
        return {key: np.asarray(value[i]) for key, value in final.items()}
    row = final[i]
    return {key: np.asarray(value) for key, value in row.items()} if isinstance(row, dict) else np.asarray(row)


def _explore(actions: np.ndarray, observation: Any, space: Any, epsilon: float, rng: np.random.Generator) -> np.ndarray:
    """``actions`` with each row replaced, with probability ``epsilon``, by a uniformly random
    action of ``space`` (among the allowed ones where ``observation`` holds an ``action_mask``)."""
    actions = np.array(actions, copy=True)
    for i in np.nonzero(rng.random(len(actions)) < epsilon)[0]:
        if isinstance(space, gym.spaces.Discrete):
            mask = observation.get("action_mask") if isinstance(observation, dict) else None
            allowed = np.arange(space.n) if mask is None else np.nonzero(np.asarray(mask[i]))[0]
            actions[i] = space.start + allowed[rng.integers(len(allowed))]
        else:
            low, high = np.broadcast_to(space.low, space.shape), np.broadcast_to(space.high, space.shape)
            actions[i] = rng.uniform(low, high).astype(actions.dtype)
    return actions


def record_dataset(
    run_dir: str,
    out: str,
    episodes: int,
    dataset_id: str | None = None,
    epsilon: float = 0.0,
    sample: bool = False,
    seed: int = 0,
    checkpoint: int | None = None,
    trust_run_dir: bool = False,
    **named: Any,
) -> dict[str, Any]:
    """Writes ``episodes`` episodes of the run's policy as a Minari dataset at ``out`` (module
    docstring); returns what it wrote (path, dataset id, counts, returns). Bad arguments are a
    one-line ``ValueError`` before the run is read, and nothing is written."""
    if isinstance(episodes, bool) or not isinstance(episodes, int) or not 1 <= episodes <= MAX_EPISODES:
        raise ValueError(f"--episodes must be in [1, {MAX_EPISODES:,}], got {episodes!r}")
    if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) or not 0.0 <= epsilon <= 1.0:
        raise ValueError(f"--epsilon must be in [0, 1], got {epsilon!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= 2**31 - 1 - ENVS_AT_ONCE:
        raise ValueError(f"--seed must be in [0, {2**31 - 1 - ENVS_AT_ONCE}], got {seed!r}")
    dataset_id = default_dataset_id(out) if dataset_id is None else dataset_id
    if not DATASET_ID.match(dataset_id):
        raise ValueError(
            f"--dataset-id {dataset_id!r} is not a Minari dataset id: (namespace/)(env/)name-vN, "
            "letters, digits, '_', '.', '-' (e.g. cartpole/dqn-medium-v0)"
        )
    minari = require_minari()
    check_out(run_dir, out)
    policy = load_policy(run_dir, checkpoint, greedy=not sample, seed=seed, trust_run_dir=trust_run_dir, **named)
    rows = min(episodes, ENVS_AT_ONCE)
    env = policy.config.make_env(rows, seed, evaluation=True)
    if getattr(env, "num_envs", rows) != rows:
        env.close()
        raise ValueError(f"shoal record writes single-agent envs' episodes; {policy.config.env.id} has many agents")
    observation_space, action_space = env.single_observation_space, env.single_action_space
    try:
        check_images(observation_space, policy.config.env.id)
    except ValueError:
        env.close()
        raise
    rng = np.random.default_rng(seed)
    done_episodes: list[Any] = []
    try:
        observation, _ = env.reset(seed=seed)
        policy.reset()
        recording: list[Episode | None] = [Episode(env_row(observation, i)) for i in range(rows)]
        first_seed = {i: seed + i for i in range(rows)}  # (the first episode of each copy is seeded)
        ids = list(range(rows))
        started = rows
        while len(done_episodes) < episodes:
            actions = np.asarray(policy(observation))
            if epsilon > 0:
                actions = _explore(actions, observation, action_space, epsilon, rng)
            observation, rewards, terminated, truncated, info = env.step(actions)
            ended = np.asarray(terminated) | np.asarray(truncated)
            policy.end_episodes(ended)
            for i in range(rows):
                episode = recording[i]
                if episode is None:
                    continue
                episode.actions.append(actions[i])
                episode.rewards.append(float(rewards[i]))
                episode.terminations.append(bool(terminated[i]))
                episode.truncations.append(bool(truncated[i]))
                if not ended[i]:
                    episode.observations.append(env_row(observation, i))
                    continue
                episode.observations.append(_final(info, i))
                done_episodes.append((ids[i], episode, first_seed.pop(i, None)))
                if started < episodes:
                    recording[i], ids[i] = Episode(env_row(observation, i)), started
                    started += 1
                else:
                    recording[i] = None
    finally:
        env.close()
    done_episodes.sort(key=lambda done: done[0])
    spec = env_spec(policy.config, observation_space, action_space)
    returns = np.asarray([sum(episode.rewards) for _, episode, _ in done_episodes])
    metadata = {
        "dataset_id": dataset_id,
        "minari_version": minari.__version__,
        "algorithm_name": f"shoal {agent_name(policy.config.builder)}",
        "description": (
            f"{episodes} episodes of the {'sampling' if sample else 'greedy'} policy of a Shoal "
            f"{agent_name(policy.config.builder)} run on {policy.config.env.id} (checkpoint {policy.checkpoint})"
            + (f", {epsilon:g} of its actions uniformly random" if epsilon else "")
        ),
    }
    parent = os.path.dirname(os.path.abspath(out))
    staging = tempfile.mkdtemp(prefix=f".{os.path.basename(os.path.normpath(out))}-", dir=parent)
    try:
        storage = new_storage(staging, observation_space, action_space, spec)
        storage.update_metadata(metadata)
        storage.update_episodes(
            episode.buffer(episode_id, episode_seed) for episode_id, episode, episode_seed in done_episodes
        )
        os.rename(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return {
        "out": out,
        "dataset_id": dataset_id,
        "load": f"minari.MinariDataset({os.path.join(out, 'data')!r})",
        "agent": agent_name(policy.config.builder),
        "env": policy.config.env.id,
        "env_spec": spec is not None,
        "checkpoint": policy.checkpoint,
        "policy": "sample" if sample else "greedy",
        "epsilon": epsilon,
        "seed": seed,
        "episodes": episodes,
        "steps": int(sum(len(episode.rewards) for _, episode, _ in done_episodes)),
        "return": {
            "mean": float(returns.mean()),
            "min": float(returns.min()),
            "max": float(returns.max()),
        },
        "minari": minari.__version__,
    }


__all__ = ["ENVS_AT_ONCE", "MAX_EPISODES", "record_dataset"]
