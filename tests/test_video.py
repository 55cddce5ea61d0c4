"""Evaluation videos: an episode rendered to an MP4 that decodes to its frames, the Atari video
env observing as ale-py's vector env does, a run that records them, and the missing extra named."""

import sys

import imageio_ffmpeg
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from shoal.actors import BatchedActor, VariableClient
from shoal.agents.ppo import PPOBuilder, PPOConfig
from shoal.core.interfaces import VariableSource
from shoal.core.types import Policy
from shoal.envs.video import RenderedAtari, check_video_extra, encode_mp4, record_episode, video_env
from shoal.launch import ExperimentConfig, run_experiment


class NoParams(VariableSource):
    def get_variables(self, known_version: int = -1):
        return (0, None) if known_version == 0 else (0, {})


def always(action: int) -> Policy:
    return Policy(lambda params, key, observation, info: (jnp.full(observation.shape[0], action, jnp.int32), {}, key))


def first_allowed() -> Policy:
    """The first move its observation's action mask allows."""
    return Policy(
        lambda params, key, observation, info: (
            jnp.argmax(observation["action_mask"], axis=-1).astype(jnp.int32),
            {},
            key,
        )
    )


def decoded(path: str) -> tuple[dict, int]:
    frames = imageio_ffmpeg.read_frames(path)
    meta = next(frames)
    return meta, sum(1 for _ in frames)


def test_a_cartpole_episode_becomes_a_video_of_its_length(tmp_path):
    config = ExperimentConfig.from_flat(builder=PPOBuilder(PPOConfig()), env_id="CartPole-v1", seed=0)
    env, render = video_env(config, seed=3)
    actor = BatchedActor(always(1), jax.random.PRNGKey(0), VariableClient(NoParams(), asynchronous=False), num_envs=1)
    frames, episode_return = record_episode(env, actor, 3, render)
    env.close()
    # CartPole pays 1 a step: the first frame, and one after each step but the last
    assert len(frames) == episode_return > 5 and frames[0].shape == (400, 600, 3) and frames[0].dtype == np.uint8
    path = tmp_path / "episode.mp4"
    path.write_bytes(encode_mp4(frames))
    meta, count = decoded(str(path))
    assert count == len(frames) and tuple(meta["size"]) == (600, 400) and meta["fps"] == 30


def test_a_pettingzoo_episode_is_one_copy_of_every_agent_until_every_agent_is_done():
    """An MPE task's 25-step episode (3 agents: 3 rows of one copy): the first frame and one
    after each step but the last; its return the agents' summed."""
    pytest.importorskip("mpe2")
    config = ExperimentConfig.from_flat(
        builder=PPOBuilder(PPOConfig()), env_id="pettingzoo:mpe2.simple_spread_v3", seed=0
    )
    env, render = video_env(config, seed=3)
    assert env.num_envs == 3
    actor = BatchedActor(always(0), jax.random.PRNGKey(0), VariableClient(NoParams(), asynchronous=False), num_envs=3)
    frames, episode_return = record_episode(env, actor, 3, render)
    env.close()
    assert len(frames) == 25 and frames[0].shape == (700, 700, 3) and frames[0].dtype == np.uint8
    assert episode_return < 0  # (MPE's rewards: minus the distances to the landmarks)


def test_a_self_play_episode_is_one_game_against_the_lookahead_player():
    """Tic-tac-toe by self-play: the video env is the evaluation's (a lookahead opponent, its
    replies made within each step); one game, a frame of the board after each of the learner's
    moves but the last, its return the learner's (-1, 0 or 1)."""
    pytest.importorskip("pettingzoo.classic")
    config = ExperimentConfig.from_flat(
        builder=PPOBuilder(PPOConfig()), env_id="pettingzoo:pettingzoo.classic.tictactoe_v3", seed=0, self_play=True
    )
    env, render = video_env(config, seed=3)
    assert env.num_envs == 1 and env.opponent == "lookahead"
    actor = BatchedActor(
        first_allowed(), jax.random.PRNGKey(0), VariableClient(NoParams(), asynchronous=False), num_envs=1
    )
    frames, episode_return = record_episode(env, actor, 3, render)
    env.close()
    assert 2 <= len(frames) <= 5 and frames[0].ndim == 3 and frames[0].dtype == np.uint8
    assert episode_return in (-1.0, 0.0, 1.0)


def test_a_long_episode_is_cut():
    config = ExperimentConfig.from_flat(builder=PPOBuilder(PPOConfig()), env_id="CartPole-v1", seed=0)
    env, render = video_env(config, seed=0)
    actor = BatchedActor(always(0), jax.random.PRNGKey(0), VariableClient(NoParams(), asynchronous=False), num_envs=1)
    assert len(record_episode(env, actor, 0, render, max_frames=4)[0]) == 4
    env.close()


@pytest.mark.e2e  # (two Atari envs, one rendering)
def test_the_atari_video_env_observes_as_the_vector_env_and_renders_the_game_in_colour():
    from shoal.envs.environments import make_atari_vector_env

    rendered = RenderedAtari("breakout", 0.0, noop_max=0)
    vector = make_atari_vector_env("ALE/Breakout-v5", 1, seed=0, sticky_actions=0.0, env_args={"noop_max": 0})
    ours, _ = rendered.reset(seed=0)
    theirs, _ = vector.reset(seed=0)
    assert ours.shape == (4, 84, 84) and ours.dtype == np.uint8
    for action in (None, 1, 2, 3, 0, 2, 2, 3):
        if action is not None:
            ours, *_ = rendered.step(action)
            theirs, *_ = vector.step(np.array([action]))
        difference = np.abs(ours.astype(int) - theirs[0].astype(int))
        assert difference.max() <= 1 and (difference > 0).mean() < 0.001  # (area averaging, rounded alike)
    frame = rendered.render()
    assert frame.shape == (210, 160, 3) and frame.dtype == np.uint8 and frame.std() > 0
    rendered.close()
    vector.close()


@pytest.mark.e2e  # (a real training run)
def test_a_run_records_videos_and_times_them(tmp_path):
    config = ExperimentConfig.from_flat(
        builder=PPOBuilder(PPOConfig(rollout_length=64)),
        env_id="CartPole-v1",
        seed=0,
        num_envs=4,
        max_env_steps=1024,
        eval_every=512,
        eval_episodes=2,
        target_return=1e9,
        run_dir=str(tmp_path / "run"),
        progress=False,
        video_every=1,
    )
    result = run_experiment(config)
    videos = sorted((tmp_path / "run" / "videos").iterdir())
    assert [v.name for v in videos] == ["eval-000000512.mp4", "eval-000001024.mp4"]
    for video in videos:
        meta, count = decoded(str(video))
        assert count >= 5 and tuple(meta["size"]) == (600, 400)
    assert result["time_breakdown"]["process"]["video"] > 0


def test_without_the_video_extra_a_run_is_refused_in_one_line(monkeypatch, capsys):
    from shoal.launch.experiments.cli.main import main

    monkeypatch.setitem(sys.modules, "imageio_ffmpeg", None)  # (import fails as if not installed)
    with pytest.raises(ValueError, match=r"evaluation videos need the 'video' extra.*pip install -e '\.\[video\]'"):
        check_video_extra()
    assert main(["train", "--agent", "dqn", "--env", "CartPole-v1", "--video-every", "1", "--dry-run"]) == 2
    assert "shoal: error: evaluation videos need the 'video' extra" in capsys.readouterr().err
