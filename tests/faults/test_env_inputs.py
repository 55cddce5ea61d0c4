"""What an env gives, read as it means or refused before anything is written (issue 36): an
action mask is non-zero where allowed whatever its dtype (item 12); a Dict observation whose keys
are not strings is one line before the run directory is made (item 11); frames a video cannot
take are one warning and no file (item 15); an evaluation episode that never ends (an env with no
time limit) is cut, with one warning."""

import re

import numpy as np
import pytest

from shoal.actors import EnvironmentLoop
from shoal.agents.components.dict_observations import action_mask
from shoal.core.specs import ArraySpec
from shoal.envs import make_vector_env
from shoal.envs.environments import environment_spec
from shoal.envs.video import encode_mp4, record_episode
from tests.faults import faulty_envs  # noqa: F401 -- (registers the envs)
from tests.faults.harness import shoal_main

MASKED = "tests.faults.faulty_envs:MaskedCartPole-v0"


class _Recorder:
    """An actor that takes action 0 and keeps every observation it is given."""

    def __init__(self):
        self.observations = []

    def select_action(self, observation):
        self.observations.append(observation)
        batch = observation["observation"] if isinstance(observation, dict) else observation
        return np.zeros(len(batch), np.int64), {}

    def observe(self, step, *args):
        pass

    def end_episodes(self, ended):
        pass

    def update(self, wait=False):
        pass


# 12. action masks


@pytest.mark.parametrize(
    "mask, key",
    [
        ([0.5, 0.0], False),
        ([256, 0], False),
        ([True, False], False),  # (in the info)
        ([256, 0], True),
        ([0.5, 0.0], True),
        ([-1, 0], True),  # (a Dict observation's key)
    ],
)
def test_a_non_zero_mask_entry_is_allowed_in_every_path(mask, key):
    args = {"mask": mask, "key": key}
    spec = environment_spec(MASKED, 2, env_args=args)
    assert spec.action_mask == ArraySpec((2,), np.int8)
    env = make_vector_env(MASKED, 2, 0, env_args=args)
    actor = _Recorder()
    loop = EnvironmentLoop(env, actor)  # (a mask read as "allows no action" stops the loop here)
    for _ in range(3):
        loop.step()
    env.close()
    for observation in actor.observations:
        assert observation["action_mask"].dtype == np.int8 and observation["action_mask"].tolist() == [[1, 0]] * 2
        stored = np.asarray(observation["action_mask"], spec.action_mask.dtype)  # (as replay keeps it)
        assert np.asarray(action_mask({"action_mask": stored})).tolist() == [[True, False]] * 2  # (as learners read it)


# 11. Dict observations keyed by what is not a string


@pytest.mark.parametrize("launcher", [[], ["--launcher", "processes", "--num-actors", "1"]])
@pytest.mark.parametrize(
    "keys, says",
    [
        ("(0, 1)", "key 0 (int) is not a string"),
        ("('cart', ('pole', 1))", "key ('pole', 1) (tuple) is not a string"),
    ],
)
def test_a_dict_observation_key_that_is_not_a_string_is_one_line_before_anything_is_written(
    tmp_path, keys, says, launcher
):
    run_dir = tmp_path / "run"
    rc, errors, text = shoal_main(
        "train",
        "--agent",
        "dqn",
        "--env",
        "tests.faults.faulty_envs:KeyedCartPole-v0",
        "--env-arg",
        f"keys={keys}",
        "--max-env-steps",
        "2000",
        "--run-dir",
        str(run_dir),
        "--quiet",
        *launcher,
    )
    assert rc == 2 and errors == [
        f"shoal: error: observation space {says}; Shoal takes a Dict observation whose "
        "keys are strings (rename them in the env)"
    ], text
    assert "Traceback" not in text and not run_dir.exists()


# 15. video frames that change size or are float


@pytest.mark.e2e  # (a real training run with videos)
@pytest.mark.parametrize(
    "frames, says",
    [
        ("resize", r"render\(\) gave frame 3 of 30x20 pixels, frame 0 of 60x40; a video's frames all have one size"),
        (
            "float",
            r"render\(\) gave frame 0 as float32 of shape \(40, 60, 3\); a video takes \[height, width, 3\] "
            r"uint8 RGB frames",
        ),
    ],
    ids=["resize", "float"],
)
def test_frames_a_video_cannot_take_are_one_warning_and_no_file(tmp_path, capfd, frames, says):
    env = make_vector_env(
        "tests.faults.faulty_envs:BadFrames-v0", 1, 0, env_args={"frames": frames, "render_mode": "rgb_array"}
    )
    with pytest.raises(ValueError, match=f"^{says}"):
        record_episode(env, _Recorder(), 0, lambda: env.call("render")[0])
    env.close()
    with pytest.raises(ValueError, match=f"^{says}"):  # (the encoder checks what it is given, too)
        encode_mp4(
            [np.zeros((40, 60, 3), np.uint8)] * 3 + [np.zeros((20, 30, 3), np.uint8)]
            if frames == "resize"
            else [np.full((40, 60, 3), 0.5, np.float32)]
        )

    run_dir = tmp_path / "run"
    rc, errors, text = shoal_main(
        "train",
        "--agent",
        "ppo",
        "--env",
        "tests.faults.faulty_envs:BadFrames-v0",
        "--env-arg",
        f"frames={frames}",
        "--set",
        "rollout_length=64",
        "--num-envs",
        "4",
        "--max-env-steps",
        "512",
        "--eval-every",
        "256",
        "--eval-episodes",
        "1",
        "--target-return",
        "1e9",
        "--video-every",
        "1",
        "--run-dir",
        str(run_dir),
        "--quiet",
    )
    assert rc == 0 and not errors, text
    warnings = [line for line in text.splitlines() if line.startswith("shoal: warning:")]
    assert len(warnings) == 1 and warnings[0].startswith("shoal: warning: no evaluation video (ValueError: "), text
    assert re.search(says, warnings[0]), warnings[0]
    assert not list(run_dir.glob("videos/*")), list(run_dir.glob("videos/*"))
    assert "Traceback" not in text and "rawvideo" not in capfd.readouterr().err  # (ffmpeg never started)


def test_evaluation_episodes_that_never_end_are_cut_at_the_bound_with_one_warning(monkeypatch, capsys):
    from shoal.actors import loops

    monkeypatch.setenv("SHOAL_EVAL_MAX_EPISODE_STEPS", "50")
    monkeypatch.setattr(loops, "_WARNED_CUT", [])
    env = make_vector_env("tests.faults.faulty_envs:Endless-v0", 2, seed=0)
    lengths = np.zeros(2, np.int64)
    for _ in range(2):
        assert loops.evaluate(env, _Recorder(), lengths=lengths).tolist() == [50.0, 50.0]
    env.close()
    assert lengths.tolist() == [100, 100]
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("shoal: warning:")]
    assert warnings == [
        "shoal: warning: evaluation episodes of Endless-v0 still running after 50 steps (envs [0, 1]): "
        "cut there, their returns so far counted (does the env set no time limit? "
        "SHOAL_EVAL_MAX_EPISODE_STEPS sets the bound)"
    ], warnings
