"""Evaluation videos: one episode of an actor in an env that renders RGB frames, written as an MP4
(``imageio-ffmpeg``, which ships its own ffmpeg binary: the ``video`` extra).

``video_env`` makes the env: the run's env with ``render_mode="rgb_array"`` (classic control,
Box2D, MuJoCo, a user's env that takes it), or for Atari a ``RenderedAtari``: ale-py's vector env
renders no RGB frames, so this one game computes the agent's observations from ALE's screens in
NumPy with the same protocol (``make_atari_vector_env``: grayscale, frameskip 4 with max-pooling,
84x84 by area averaging, a stack of 4, no-op starts, FIRE at reset, sticky actions) while the
video shows the game's own 210x160 RGB screen.
"""

from __future__ import annotations

import io
import os
import tempfile
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any, cast

import gymnasium as gym
import numpy as np

from shoal.core.interfaces import Actor
from shoal.envs.environments import _atari_game, is_atari, make_vector_env
from shoal.envs.multiagent import AgentRows
from shoal.envs.selfplay import SelfPlayRows

MAX_FRAMES = 5_000  # (a longer episode is cut: about 2.8 minutes at 30 frames a second)
FPS = 30


def check_video_extra() -> None:
    """One ``ValueError`` naming the extra if ``imageio-ffmpeg`` is not installed."""
    try:
        import imageio_ffmpeg  # lazy: optional extra (video)

        del imageio_ffmpeg
    except ImportError:
        raise ValueError(
            "evaluation videos need the 'video' extra, which is not installed; run "
            "pip install -e '.[video]' (from the Shoal repository)"
        ) from None


def check_frame(frame: Any, index: int, first: np.ndarray | None = None) -> np.ndarray:
    """``frame``, the ``index``-th of an episode, if a video can take it: an ``[H, W, 3]`` uint8
    array of the ``first`` frame's size. Anything else (a float frame, one that changes size, an
    RGBA or grayscale one, ``None``) is a ``ValueError`` (one line): ffmpeg would write a broken
    file of it (a size it was not told), or a black one (floats in [0, 1] cast to uint8)."""
    if not isinstance(frame, np.ndarray) or frame.dtype != np.uint8 or frame.ndim != 3 or frame.shape[2] != 3:
        what = (
            f"a {type(frame).__name__}"
            if not isinstance(frame, np.ndarray)
            else f"{frame.dtype} of shape {frame.shape}"
        )
        raise ValueError(
            f"render() gave frame {index} as {what}; a video takes [height, width, 3] uint8 RGB "
            "frames (render_mode='rgb_array')"
        )
    if first is not None and frame.shape != first.shape:
        raise ValueError(
            f"render() gave frame {index} of {frame.shape[1]}x{frame.shape[0]} pixels, frame 0 of "
            f"{first.shape[1]}x{first.shape[0]}; a video's frames all have one size"
        )
    return frame


def record_episode(
    env: gym.vector.VectorEnv, actor: Actor, seed: int, render: Callable[[], np.ndarray], max_frames: int = MAX_FRAMES
) -> tuple[list[np.ndarray], float]:
    """Frames (``[H, W, 3]`` uint8) of one episode of ``actor`` in the 1-env ``env`` from its
    reset with ``seed`` (the first frame, then one after each step but the last: autoreset
    has already started the next episode by then), and the episode's return. A frame a video
    cannot take stops it with a ``ValueError`` (``check_frame``), before anything is encoded.
    A PettingZoo env's rows (one copy, a row per agent): the episode ends when every agent's
    has, and its return is the agents' summed."""
    obs, _ = env.reset(seed=seed)
    actor.end_episodes(np.ones(env.num_envs, bool))
    first = check_frame(render(), 0)
    frames, total = [first], 0.0
    ended = np.zeros(env.num_envs, bool)  # (a multi-agent env's rows: the episode ends when every agent's has)
    while len(frames) < max_frames:
        action, _ = actor.select_action(obs)
        obs, reward, terminated, truncated, _ = env.step(np.asarray(action))
        total += float(np.sum(reward[~ended]))
        ended |= np.asarray(terminated) | np.asarray(truncated)
        if ended.all():
            break
        frames.append(check_frame(render(), len(frames), first))
    return frames, total


def record_episode_within(
    env: gym.vector.VectorEnv,
    actor: Actor,
    seed: int,
    render: Callable[[], np.ndarray],
    frame_timeout_s: float,
    max_frames: int = MAX_FRAMES,
) -> tuple[list[np.ndarray], float]:
    """``record_episode`` in a thread of its own, each frame (its step and its ``render()``)
    given at most ``frame_timeout_s`` seconds: a frame that takes longer is a ``TimeoutError``
    (one line). A call into the env cannot be interrupted: the thread is left where it is stuck
    (a daemon), and ``env`` must not be used again, not even closed."""
    last = [time.monotonic()]  # (when the last frame came: the thread writes it, this one reads it)

    def timed_render() -> np.ndarray:
        frame = render()
        last[0] = time.monotonic()
        return frame

    outcome: dict[str, Any] = {}
    done = threading.Event()

    def record() -> None:
        try:
            outcome["episode"] = record_episode(env, actor, seed, timed_render, max_frames)
        except BaseException as e:  # noqa: BLE001 -- raised again in the caller's thread
            outcome["error"] = e
        finally:
            done.set()

    threading.Thread(target=record, name="shoal-video", daemon=True).start()
    while not done.wait(min(1.0, frame_timeout_s / 4)):
        if time.monotonic() - last[0] > frame_timeout_s:
            raise TimeoutError(
                f"the env gave no frame in {frame_timeout_s:g} s (its render() or step() did not "
                f"return; SHOAL_STEP_TIMEOUT_S); it is left where it hangs"
            )
    if "error" in outcome:
        raise outcome["error"]
    return outcome["episode"]


def encode_mp4(frames: list[np.ndarray], fps: int = FPS) -> bytes:
    """The frames as H.264 MP4 bytes (``imageio-ffmpeg``); frames it cannot take are a
    ``ValueError`` before ffmpeg starts (``check_frame``)."""
    import imageio_ffmpeg  # lazy: optional extra (video)

    if not frames:
        raise ValueError("a video needs at least one frame")
    for index, frame in enumerate(frames):
        check_frame(frame, index, frames[0])

    height, width = frames[0].shape[:2]
    with tempfile.TemporaryDirectory(prefix="shoal-video-") as tmp:
        path = os.path.join(tmp, "episode.mp4")
        writer = imageio_ffmpeg.write_frames(
            path, (width, height), fps=fps, macro_block_size=2, ffmpeg_log_level="error"
        )
        with warnings.catch_warnings():  # (JAX warns of any fork; ffmpeg's is a fork and exec)
            warnings.filterwarnings("ignore", "os.fork", RuntimeWarning)
            writer.send(None)  # (starts ffmpeg)
        for frame in frames:
            writer.send(np.ascontiguousarray(frame, np.uint8))
        writer.close()
        with open(path, "rb") as f:
            return f.read()


def encode_gif(
    frames: list[np.ndarray], fps: int = FPS, max_width: int = 240, max_fps: int = 15
) -> tuple[bytes, tuple[int, int]]:
    """The frames as an animated GIF (Pillow), at most ``max_width`` pixels wide and
    ``max_fps`` frames a second (frames dropped evenly), and its ``(height, width)``."""
    from PIL import Image  # lazy: Pillow, not a dependency (GIFs only)

    every = max(1, round(fps / max_fps))
    height, width = frames[0].shape[:2]
    scale = min(1.0, max_width / width)
    size = (max(1, round(width * scale)), max(1, round(height * scale)))
    images = [
        Image.fromarray(np.ascontiguousarray(frame, np.uint8))
        .resize(size, Image.Resampling.BILINEAR)
        .quantize(colors=64, method=Image.Quantize.FASTOCTREE)
        for frame in frames[::every]
    ]
    data = io.BytesIO()
    images[0].save(
        data, format="GIF", save_all=True, append_images=images[1:], loop=0, duration=round(1000 * every / fps)
    )
    return data.getvalue(), (size[1], size[0])


class TensorBoardVideos:
    """Evaluation videos in TensorBoard, as animated GIF images (tag ``eval/video``; its Images
    tab plays them), written under ``directory`` (the run's ``tb/eval``)."""

    def __init__(self, directory: str) -> None:
        self._directory = directory
        self._writer: Any = None

    def add(self, frames: list[np.ndarray], step: int, fps: int = FPS) -> None:
        from tensorboardX import SummaryWriter  # lazy: tensorboardX (protobuf), videos only
        from tensorboardX.proto.summary_pb2 import Summary  # lazy: tensorboardX (protobuf), videos only

        gif, (height, width) = encode_gif(frames, fps)
        if self._writer is None:
            # (a file of its own: the eval log's writer may open one of the same second's name)
            self._writer = SummaryWriter(self._directory, flush_secs=5, filename_suffix=".videos")
        image = Summary.Image(height=height, width=width, colorspace=3, encoded_image_string=gif)
        self._writer._get_file_writer().add_summary(Summary(value=[Summary.Value(tag="eval/video", image=image)]), step)
        self._writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()


def video_env(config: Any, seed: int) -> tuple[gym.vector.VectorEnv, Callable[[], np.ndarray]]:
    """A 1-env evaluation env of ``config`` (an ``ExperimentConfig``) that renders, and the
    function that returns its current RGB frame (see the module docstring)."""
    if is_atari(config.env.id) and config.env.factory is None:
        game = _atari_game(config.env.id)
        atari = gym.vector.SyncVectorEnv(
            [lambda: RenderedAtari(game, config.env.sticky_actions)], autoreset_mode=gym.vector.AutoresetMode.SAME_STEP
        )
        atari.reset(seed=seed)
        return atari, lambda: cast(np.ndarray, atari.envs[0].render())
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")  # (pygame draws off screen, and says nothing of it)
    env = make_vector_env(
        config.env.id,
        1,
        seed,
        evaluation=True,
        env_args={**config.env.args, "render_mode": "rgb_array"},
        env_factory=config.env.factory,
        action_masks=config.env.action_masks,
        agent_ids=config.multiagent.agent_ids,
        global_state=config.multiagent.global_state,
        self_play=config.multiagent.self_play,
    )
    if isinstance(env, (AgentRows, SelfPlayRows)):
        return env, cast(Callable[[], np.ndarray], env.render)
    return env, lambda: cast(Any, env).call("render")[0]  # (a SyncVectorEnv or a wrapper of one)


def _area_weights(size: int, out: int) -> np.ndarray:
    """``[out, size]``: output pixel j averages the input over ``[j, j + 1) * size / out`` (what
    OpenCV's ``INTER_AREA`` does when shrinking)."""
    edges = np.arange(out + 1) * size / out
    lows, highs = np.arange(size), np.arange(size) + 1
    overlap = np.clip(np.minimum(highs[None], edges[1:, None]) - np.maximum(lows[None], edges[:-1, None]), 0, None)
    return overlap * out / size


class RenderedAtari(gym.Env):
    """One Atari game whose observations follow ``make_atari_vector_env``'s protocol (channels
    first, ``[4, 84, 84]`` uint8) and whose ``render()`` is its RGB screen (see the module)."""

    metadata = {"render_modes": ["rgb_array"]}

    def __init__(self, game: str, sticky_actions: float, noop_max: int = 30) -> None:
        from ale_py import AtariEnv  # lazy: optional extra (atari)

        self._env = AtariEnv(
            game,
            obs_type="grayscale",
            frameskip=1,
            repeat_action_probability=sticky_actions,
            max_num_frames_per_episode=108_000,
            render_mode="rgb_array",
        )
        self.action_space = self._env.action_space
        self.observation_space = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
        self._rows, self._cols = _area_weights(210, 84), _area_weights(160, 84).T
        self._noop_max = noop_max
        self._fire = "FIRE" in self._env.unwrapped.get_action_meanings()
        self._stack = np.zeros((4, 84, 84), np.uint8)

    def _push(self, screen: np.ndarray) -> np.ndarray:
        frame = np.rint(self._rows @ screen.astype(np.float64) @ self._cols).astype(np.uint8)
        self._stack = np.concatenate([self._stack[1:], frame[None]])
        return self._stack.copy()

    def reset(self, *, seed: int | None = None, options: Any = None):
        screen, info = self._env.reset(seed=seed)
        for _ in range(int(self._env.np_random.integers(0, self._noop_max + 1))):
            screen, _, terminated, truncated, info = self._env.step(0)
            if terminated or truncated:
                screen, info = self._env.reset()
        if self._fire:
            screen, *_ = self._env.step(1)
        self._stack[:] = 0  # (the earlier frames of a new episode are black, as ale-py's vector env has them)
        return self._push(screen), info

    def step(self, action):
        total, screens = 0.0, []
        for _ in range(4):
            screen, reward, terminated, truncated, info = self._env.step(int(action))
            total += float(reward)
            screens.append(screen)
            if terminated or truncated:
                break
        return (
            self._push(np.maximum(*screens[-2:]) if len(screens) > 1 else screens[0]),
            total,
            terminated,
            truncated,
            info,
        )

    def render(self) -> np.ndarray:
        return self._env.render()

    def close(self) -> None:
        self._env.close()
