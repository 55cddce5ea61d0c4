"""Unit tests of ``shoal.core``'s small pieces, in this process: settings (``--set`` parsing and
range checks), environment specs, and the counter."""

from __future__ import annotations

import dataclasses
import threading
import types

import gymnasium as gym
import numpy as np
import pytest

from shoal.core.counting import Counter
from shoal.core.settings import Range, check_settings, parse_setting, setting
from shoal.core.specs import ArraySpec, make_environment_spec


@dataclasses.dataclass
class Config:
    rate: float = setting(1e-3, low=0.0, low_open=True, high=1.0)
    steps: int = setting(10, low=1)
    flag: bool = False
    sizes: tuple[int, ...] = setting((64, 64), low=1, high=65536, items=True)
    target: float | None = setting(None, low=-1.0, high=1.0, high_open=True)
    name: str = "x"


# --- settings: parse_setting reads ``--set KEY=VALUE`` as the field's type


@pytest.mark.parametrize(
    "key, text, value",
    [
        ("rate", "0.5", 0.5),
        ("rate", " 1e-4 ", 1e-4),
        ("steps", "7", 7),
        ("flag", "true", True),
        ("flag", "0", False),
        ("flag", "TRUE", True),
        ("sizes", "256,128", (256, 128)),
        ("sizes", "32", (32,)),
        ("target", "none", None),
        ("target", "0.25", 0.25),
        ("name", "y", "y"),
    ],
)
def test_parse_setting_reads_text_as_the_fields_type(key, text, value):
    parsed = parse_setting(Config, key, text)
    assert parsed == value and type(parsed) is type(value)


@pytest.mark.parametrize(
    "key, text, message",
    [
        ("rate", "fast", "--set rate='fast': expected a float like 0.001"),
        ("steps", "1.5", "--set steps='1.5': expected a"),  # ("a int like 10": wording, see report)
        ("flag", "yes", "--set flag='yes': expected a bool like False"),
        ("sizes", "64,x", "--set sizes='64,x': expected a tuple like (64, 64)"),
        ("rate", "none", "--set rate='none': expected a float"),  # not optional
        ("nope", "1", "unknown setting 'nope'; known: flag, name, rate, sizes, steps, target"),
    ],
)
def test_parse_setting_refuses_in_one_line(key, text, message):
    with pytest.raises(ValueError) as refused:
        parse_setting(Config, key, text)
    assert str(refused.value).startswith(message) and "\n" not in str(refused.value)


def test_check_settings_accepts_the_defaults_and_values_inside_their_ranges():
    check_settings(Config())
    check_settings(Config(rate=1.0, steps=10**12, sizes=[1, 65536], target=-1.0))


@pytest.mark.parametrize(
    "change, message",
    [
        ({"rate": 0.0}, "cfg.rate must be a finite number in (0, 1], got 0.0"),  # an open end
        ({"rate": float("nan")}, "cfg.rate must be a finite number in (0, 1], got nan"),
        ({"rate": True}, "cfg.rate must be a finite number in (0, 1], got True"),  # a bool is no number
        ({"rate": "0.5"}, "cfg.rate must be a finite number"),
        ({"steps": 0}, "cfg.steps must be an integer in [1, inf), got 0"),
        ({"steps": 2.0}, "cfg.steps must be an integer in [1, inf), got 2.0"),
        ({"sizes": ()}, "cfg.sizes must be a non-empty list of numbers in [1, 65536], got ()"),
        ({"sizes": (64, 0)}, "cfg.sizes must be an integer in [1, 65536], got (64, 0)"),
        ({"sizes": 64}, "cfg.sizes must be a non-empty list of numbers"),
        ({"target": 1.0}, "cfg.target must be a finite number in [-1, 1), got 1.0"),
        ({"flag": "false"}, "cfg.flag must be true or false, got 'false'"),  # (a truthy string)
        ({"flag": 0}, "cfg.flag must be true or false, got 0"),
    ],
)
def test_check_settings_names_the_first_bad_field(change, message):
    with pytest.raises(ValueError) as refused:
        check_settings(dataclasses.replace(Config(), **change), prefix="cfg.")
    assert str(refused.value).startswith(message)


def test_ranges_describe_their_ends():
    assert Range(0, 1, low_open=True).describe() == "(0, 1]"
    assert Range(low=1).describe() == "[1, inf)"
    assert Range(high=5, high_open=True).describe() == "(-inf, 5)"
    assert Range(0.5, 1e20).describe() == "[0.5, 1e+20]"
    assert Range(0, 1, low_open=True).contains(1) and not Range(0, 1, low_open=True).contains(0)


def test_a_mutable_default_is_copied_for_each_instance():
    @dataclasses.dataclass
    class WithList:
        values: list = setting([1, 2])

    first, second = WithList(), WithList()
    first.values.append(3)
    assert second.values == [1, 2]


# --- specs: what an agent needs, read off gymnasium spaces


def fake_env(observation_space, action_space, **more):
    return types.SimpleNamespace(observation_space=observation_space, action_space=action_space, **more)


def test_a_discrete_env_spec():
    env = gym.make("CartPole-v1")
    spec = make_environment_spec(env)
    env.close()
    assert spec.observation == ArraySpec((4,), np.float32) and spec.action == ArraySpec((), np.int32)
    assert spec.num_actions == 2 and spec.discrete_actions and spec.num_envs == 1 and spec.observation_shape == (4,)


def test_float64_observations_become_float32_and_integer_ones_keep_their_dtype():
    box = gym.spaces.Box(-1.0, 1.0, (3,), np.float64)
    assert make_environment_spec(fake_env(box, gym.spaces.Discrete(4))).observation.dtype == np.float32
    frames = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    assert make_environment_spec(fake_env(frames, gym.spaces.Discrete(6))).observation == ArraySpec(
        (4, 84, 84), np.uint8
    )


def test_continuous_actions_and_a_vector_envs_single_spaces():
    single_obs, single_act = gym.spaces.Box(-1, 1, (3,), np.float32), gym.spaces.Box(-2, 2, (1,), np.float64)
    env = fake_env(
        gym.spaces.Box(-1, 1, (8, 3), np.float32),
        gym.spaces.Box(-2, 2, (8, 1), np.float64),
        single_observation_space=single_obs,
        single_action_space=single_act,
        num_envs=8,
    )
    spec = make_environment_spec(env)
    assert spec.action == ArraySpec((1,), np.float32) and spec.num_actions is None and not spec.discrete_actions
    assert spec.observation.shape == (3,) and spec.num_envs == 8 and spec.observation_space is single_obs


@pytest.mark.parametrize(
    "observation, action, message",
    [
        (gym.spaces.Tuple([gym.spaces.Box(-1, 1, (2,))]), gym.spaces.Discrete(2), "Shoal agents take Box observations"),
        (gym.spaces.Dict({"x": gym.spaces.Discrete(2)}), gym.spaces.Discrete(2), "key 'x': Discrete.*one-hot"),
        (
            gym.spaces.Dict({"x": gym.spaces.Dict({"y": gym.spaces.Box(-1, 1, (2,))})}),
            gym.spaces.Discrete(2),
            "key 'x': is a nested Dict; Shoal takes a flat Dict",
        ),
        (gym.spaces.Box(-1, 1, (2,)), gym.spaces.MultiDiscrete([2, 2]), "Shoal agents take Discrete or Box actions"),
    ],
)
def test_unsupported_spaces_are_refused_naming_what_is_taken(observation, action, message):
    with pytest.raises(ValueError, match=message):
        make_environment_spec(fake_env(observation, action))


def test_array_specs_normalise_shape_and_dtype_and_make_batched_zeros():
    spec = ArraySpec([np.int64(2), 3], "float32")
    assert spec.shape == (2, 3) and type(spec.shape[0]) is int and spec.dtype == np.dtype(np.float32)
    zeros = spec.zeros(5, 4)
    assert zeros.shape == (5, 4, 2, 3) and zeros.dtype == np.float32 and not zeros.any()
    assert spec == ArraySpec((2, 3), np.float32) and hash(spec) == hash(ArraySpec((2, 3), np.float32))


# --- the counter


def test_counts_add_up_and_integral_numbers_of_any_kind_are_integers():
    counter = Counter({"env_steps": 5})
    assert counter.increment(env_steps=10.0, episodes=np.int64(2), frames=np.array(3)) == {
        "env_steps": 15,
        "episodes": 2,
        "frames": 3,
    }
    assert all(type(v) is int for v in counter.get_counts().values())
    assert counter.increment() == counter.get_counts() == counter.save()


@pytest.mark.parametrize("bad", [-1, 1.5, float("nan"), float("inf"), True, "7", np.ones(2), None, 2**53])
def test_a_bad_value_refuses_the_whole_call_and_changes_nothing(bad):
    counter = Counter({"env_steps": 5})
    with pytest.raises(ValueError, match="non-negative integers below 2\\*\\*53; got env_steps="):
        counter.increment(episodes=1, env_steps=bad)
    assert counter.get_counts() == {"env_steps": 5}


def test_a_total_may_not_reach_2_to_the_53():
    counter = Counter({"big": 2**53 - 2})
    with pytest.raises(ValueError, match="counter big would reach 9,007,199,254,740,992.*no count was changed"):
        counter.increment(small=1, big=2)
    assert counter.get_counts() == {"big": 2**53 - 2}
    assert counter.increment(big=1) == {"big": 2**53 - 1}


def test_restore_replaces_the_counts_and_checks_them():
    counter = Counter({"a": 1})
    counter.restore({"b": 2})
    assert counter.get_counts() == {"b": 2}
    with pytest.raises(ValueError, match="got a=-3"):
        counter.restore({"a": -3})
    assert counter.get_counts() == {"b": 2}


def test_increments_from_many_threads_lose_nothing():
    counter, start = Counter(), threading.Barrier(8)

    def add():
        start.wait()
        for _ in range(1000):
            counter.increment(env_steps=3, episodes=1)

    threads = [threading.Thread(target=add) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert counter.get_counts() == {"env_steps": 24_000, "episodes": 8000}


@pytest.mark.parametrize("env_id, num_envs", [("CartPole-v1", 3), ("Pendulum-v1", 2), ("ALE/Pong-v5", 2)])
def test_the_spec_read_off_one_single_env_is_the_vector_envs(env_id, num_envs):
    """What a distributed run's driver hands its nodes (no vector env built) is what they step."""
    from shoal.envs import environment_spec, make_vector_env

    if env_id.startswith("ALE/"):
        pytest.importorskip("ale_py")
    env = make_vector_env(env_id, num_envs, seed=0)
    try:
        stepped = make_environment_spec(env)
    finally:
        env.close()
    assert environment_spec(env_id, num_envs) == stepped and stepped.num_envs == num_envs


def test_process_seconds_count_from_the_process_start():
    import subprocess
    import sys

    # (a fresh process that sleeps before importing it: the sleep is counted, as imports are)
    code = "import time\ntime.sleep(0.6)\nfrom shoal.core.timing import process_seconds\nprint(process_seconds())"
    seconds = float(
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True).stdout
    )
    assert 0.6 <= seconds < 30


def test_a_slow_block_says_so_while_it_runs_and_how_long_it_took():
    import io

    from shoal.core.notices import while_slow
    from tests.waiting import wait_for

    out = io.StringIO()
    with while_slow("compiling x", out, after_s=0.01, every_s=0.01, hint="; a hint"):
        wait_for(lambda: "still compiling x" in out.getvalue(), 30, "the notice")
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("[train] still compiling x (") and lines[0].endswith(" s); a hint"), lines
    assert lines[-1].startswith("[train] done compiling x in ") and len(lines) >= 2
    quiet = io.StringIO()
    with while_slow("compiling y", quiet, after_s=60):
        pass
    assert quiet.getvalue() == ""  # (a block that ends in time prints nothing)
