"""Brax's envs as JAX env sources (``--env brax:<name>``, ``shoal.envs.brax_envs``): the adapter's
time limit and resets through the gymnasium vector env the replay-backed actors step, PPO in the
compiled loop through ``shoal train``, and the one-line refusals.

Brax is the ``brax`` extra, Python 3.12+ (JAX >= 0.10, numpy 2): on Python 3.11 these skip, and
there a ``brax:`` id is one line naming the install.
"""

from __future__ import annotations

import csv
import json
import sys

import numpy as np
import pytest

from shoal.envs.jax_envs import check_jax_env_id, make_jax_env
from shoal.launch.experiments.cli.main import main


def test_without_brax_a_brax_id_is_one_line_naming_the_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "brax", None)  # (import brax fails, as where it is not installed)
    monkeypatch.setitem(sys.modules, "brax.envs", None)
    with pytest.raises(ValueError, match=r"brax envs need the 'brax' extra.*pip install -e '\.\[brax\]'"):
        check_jax_env_id("brax:halfcheetah")


def test_an_unknown_brax_name_or_argument_is_one_line():
    pytest.importorskip("brax.envs", reason="the brax extra (Python 3.12+)")
    with pytest.raises(ValueError, match=r"unknown brax environment id 'halfcheeta'; did you mean brax:halfcheetah"):
        check_jax_env_id("brax:halfcheeta")
    with pytest.raises(ValueError, match=r"brax:ant has no parameter gravity; --env-arg sets backend"):
        make_jax_env("brax:ant", {"gravity": 1.0})
    with pytest.raises(ValueError, match=r"backend must be one of mjx, generalized, positional, spring, got 'fast'"):
        make_jax_env("brax:ant", {"backend": "fast"})
    with pytest.raises(ValueError, match=r"episode_length must be a positive integer, got 0"):
        make_jax_env("brax:ant", {"episode_length": 0})
    with pytest.raises(ValueError, match=r"brax:swimmer does not run here: Brax 0.14's swimmer calls jnp.clip"):
        make_jax_env("brax:swimmer")


@pytest.mark.e2e  # (compiles Brax's physics step: ~20 s on 2 cores)
def test_the_time_limit_truncates_and_the_vector_env_resets_with_the_final_observation():
    pytest.importorskip("brax.envs", reason="the brax extra (Python 3.12+)")
    from shoal.envs import make_vector_env

    env = make_vector_env("brax:inverted_pendulum", 2, seed=0, env_args={"backend": "positional", "episode_length": 5})
    assert env.single_observation_space.shape == (4,) and env.single_action_space.shape == (1,)
    assert float(env.single_action_space.low[0]) == -1.0 and float(env.single_action_space.high[0]) == 1.0
    observation, _ = env.reset(seed=0)
    for t in range(10):  # two episodes of 5 steps: the step count restarts with each
        observation, reward, terminated, truncated, info = env.step(np.zeros((2, 1), np.float32))
        assert not terminated.any()  # (held still, the pendulum stays up within 5 steps)
        assert list(truncated) == [t in (4, 9)] * 2
        assert np.isfinite(reward).all()
        if t in (4, 9):
            assert set(np.flatnonzero(info["_final_obs"])) == {0, 1}
            for i in range(2):  # the final observation is the episode's last; the next one a fresh start
                assert info["final_obs"][i].shape == (4,) and not np.array_equal(info["final_obs"][i], observation[i])
    env.close()
    # pushed one way, the pendulum falls: Brax's done is a termination, not a truncation
    env = make_vector_env("brax:inverted_pendulum", 2, seed=0, env_args={"backend": "positional"})
    env.reset(seed=0)
    for _ in range(200):
        _, _, terminated, truncated, _ = env.step(np.ones((2, 1), np.float32))
        assert not truncated.any()
        if terminated.all():
            break
    assert terminated.all()
    env.close()


@pytest.mark.e2e  # (compiles PPO with Brax's physics in one loop: ~60 s on 2 cores)
def test_ppo_trains_on_a_brax_env_in_the_compiled_loop(tmp_path, capsys):
    pytest.importorskip("brax.envs", reason="the brax extra (Python 3.12+)")
    argv = ["train", "--agent", "ppo", "--env", "brax:inverted_pendulum", "--env-arg", "backend=positional"]
    argv += ["--preset", "none"]  # (ppo/brax: 2,048 envs, an accelerator's; test_unit_agents validates it)
    argv += ["--max-env-steps", "8192", "--eval-every", "4096", "--run-dir", str(tmp_path / "run"), "--quiet"]
    assert main(argv) == 0, capsys.readouterr().err[-2000:]
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["launcher"] == "anakin" and result["env"] == "brax:inverted_pendulum", result
    assert result["env_steps"] >= 8192 and result["learner_steps"] > 0 and np.isfinite(result["final_eval_return"])
    with open(tmp_path / "run" / "learner.csv", newline="") as f:
        losses = [float(row["loss"]) for row in csv.DictReader(f)]
    assert losses and np.isfinite(losses).all()
