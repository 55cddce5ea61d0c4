"""JaxMARL's envs as JAX env sources (``--env jaxmarl:<Name>``, ``shoal.envs.jaxmarl_envs``): the
agents as rows, PPO (IPPO, and MAPPO with ``--global-state``) in the compiled loop and through the replay-backed runner, and the
one-line refusals.

JaxMARL is the ``jaxmarl`` extra, installed without its dependencies as gymnax is (the README's
test command: ``constraints/without-deps.txt``); without it these skip, and a ``jaxmarl:`` id is
one line naming the install.
"""

from __future__ import annotations

import json
import sys
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from shoal.envs.jax_envs import check_jax_env_id, make_jax_vector_env
from shoal.launch.experiments.anakin.evaluation import make_evaluation
from shoal.launch.experiments.cli.main import main

SPREAD = "jaxmarl:MPE_simple_spread_v3"


def _jaxmarl() -> None:
    pytest.importorskip("jaxmarl", reason="the jaxmarl extra (pip install --no-deps jaxmarl==0.2.0)")


def test_without_jaxmarl_a_jaxmarl_id_is_one_line_naming_the_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "jaxmarl", None)  # (import jaxmarl fails, as where it is not installed)
    with pytest.raises(ValueError, match=r"jaxmarl envs need the 'jaxmarl' extra.*--no-deps \"jaxmarl==0\.2\.0\""):
        check_jax_env_id(SPREAD)


@pytest.mark.e2e  # (imports JaxMARL, which imports Brax where it is installed: ~8 s; and compiles MPE's step)
def test_the_agents_are_rows_and_an_episode_ends_every_row_of_its_copy():
    _jaxmarl()
    venv = make_jax_vector_env(SPREAD, None, 2)  # (2 copies of 3 agents: 6 rows)
    assert venv.num_envs == 6 and venv.spec.num_envs == 6 and venv.spec.action_space.n == 5
    assert venv.spec.observation.shape == (18 + 3,)  # (each agent's 18 values, then its one-hot identity)
    obs, state = venv.reset(jax.random.PRNGKey(0))
    assert obs.shape == (6, 21)
    np.testing.assert_array_equal(obs[:, 18:], np.tile(np.eye(3), (2, 1)))  # (copy by copy, agents in order)
    step = jax.jit(venv.step)
    for t in range(26):  # (JaxMARL's MPE: done once its step counter passes max_steps 25)
        state, out = step(jax.random.PRNGKey(t), state, jnp.zeros(6, jnp.int32))
        assert bool(out.truncated.any()) == (t == 25)
    assert out.truncated.all() and not out.terminated.any()  # (a time limit: bootstrapped)
    assert (out.episode_length == 26).all()
    returns = np.asarray(out.episode_return).reshape(2, 3)
    assert np.isfinite(returns).all() and (returns < 0).all()


@pytest.mark.e2e  # (imports JaxMARL: ~8 s)
def test_the_global_state_and_an_evaluation_plays_whole_copies():
    _jaxmarl()
    venv = make_jax_vector_env(SPREAD, None, 2, agent_ids=True, global_state=True)
    assert set(venv.spec.observation_space.spaces) == {"observation", "agent_id", "global_state"}
    obs, state = venv.reset(jax.random.PRNGKey(1), 4)  # (4 rows: 2 copies, 6 rows)
    assert obs["global_state"].shape == (6, 54) and state.episode_return.shape == (6,)
    np.testing.assert_array_equal(obs["global_state"][0], np.asarray(obs["observation"][:3]).reshape(-1))
    # an evaluation of 3 episodes plays 3 copies: 9 rows, every agent of each (as the replay path's)
    policy = SimpleNamespace(initial_state=None, apply=lambda params, key, obs, info: (jnp.zeros(9, jnp.int32), 0, 0))
    returns, lengths = make_evaluation(policy, venv, 3)(None, jax.random.PRNGKey(0))
    assert returns.shape == lengths.shape == (9,) and (np.asarray(lengths) == 26).all()
    by_copy = np.asarray(returns).reshape(3, 3)
    assert (by_copy < 0).all() and venv.agents == ["agent_0", "agent_1", "agent_2"]


@pytest.mark.e2e  # (imports JaxMARL: ~8 s)
def test_an_env_that_masks_actions_gives_each_row_its_agents_mask():
    _jaxmarl()
    venv = make_jax_vector_env("jaxmarl:HeuristicEnemySMAX", None, 2)  # (SMAX's get_avail_actions: 5 allies)
    assert venv.num_envs == 10 and set(venv.spec.observation_space.spaces) == {"observation", "agent_id", "action_mask"}
    obs, state = venv.reset(jax.random.PRNGKey(0))
    mask = np.asarray(obs["action_mask"])
    assert mask.shape == (10, venv.spec.action_space.n) and mask.dtype == np.int8
    assert mask.any(-1).all() and not mask.all()  # (each row some action, none every action: enemies out of range)
    state, out = jax.jit(venv.step)(jax.random.PRNGKey(1), state, jnp.full(10, 4, jnp.int32))  # (4: stop)
    assert out.observation["action_mask"].shape == (10, venv.spec.action_space.n)
    assert out.final_observation["action_mask"].shape == (10, venv.spec.action_space.n)


@pytest.mark.e2e  # (imports JaxMARL: ~8 s)
def test_unknown_ids_unmappable_envs_and_arguments_are_one_line():
    _jaxmarl()
    with pytest.raises(ValueError, match=r"unknown jaxmarl environment id 'MPE_simple_sprad_v3'; did you mean"):
        check_jax_env_id("jaxmarl:MPE_simple_sprad_v3")
    with pytest.raises(
        ValueError, match=r"MPE_simple_tag_v3: agents adversary_0 and agent_0 have different observation"
    ):
        make_jax_vector_env("jaxmarl:MPE_simple_tag_v3", None, 1)
    with pytest.raises(ValueError, match=r"switch_riddle: its agents' observation space is a MultiDiscrete"):
        make_jax_vector_env("jaxmarl:switch_riddle", None, 1)
    with pytest.raises(
        ValueError, match=r"jaxnav masks its agents' actions \(get_avail_actions\), which are not Discrete"
    ):
        make_jax_vector_env("jaxmarl:jaxnav", None, 1)
    with pytest.raises(ValueError, match=r"MPE_simple_spread_v3 takes no argument\(s\) gravity; it takes: num_agents"):
        make_jax_vector_env(SPREAD, {"gravity": 1.0}, 1)
    assert make_jax_vector_env(SPREAD, {"num_agents": 4, "num_landmarks": 4}, 1).num_envs == 4


@pytest.mark.e2e  # (imports JaxMARL: ~8 s)
@pytest.mark.parametrize("env_id", ["jaxmarl:MPE_simple_sprad_v3", "jaxmarl:MPE_simple_tag_v3"])
def test_shoal_train_refuses_in_one_line_and_writes_nothing(tmp_path, capsys, env_id):
    _jaxmarl()
    run = tmp_path / "run"
    assert main(["train", "--agent", "ppo", "--env", env_id, "--run-dir", str(run), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and env_id.partition(":")[2] in err[0], err
    assert not run.exists()


@pytest.mark.e2e  # (compiles MPE and PPO in one loop: ~20 s of CPU)
@pytest.mark.parametrize("flags", [[], ["--global-state"]], ids=["ippo", "mappo"])
def test_ppo_trains_on_simple_spread_in_the_compiled_loop(tmp_path, capsys, flags):
    _jaxmarl()
    if flags and sys.version_info < (3, 12):
        pytest.skip("CI time: Python 3.12's run trains MAPPO (the same rows and loop on both stacks)")
    argv = ["train", "--agent", "ppo", "--env", SPREAD, *flags, "--num-envs", "4", "--max-env-steps", "1536"]
    argv += ["--eval-every", "1536", "--eval-episodes", "4", "--run-dir", str(tmp_path / "run"), "--quiet"]
    assert main(argv) == 0, capsys.readouterr().err[-2000:]
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["launcher"] == "anakin" and result["env_steps"] == 1536 and result["learner_steps"] > 0, result
    assert np.isfinite(result["final_eval_return"])


@pytest.mark.e2e  # (a replay-backed run: ~20 s of CPU)
def test_ippo_trains_on_simple_spread_through_the_replay_backed_runner():
    _jaxmarl()
    from shoal.launch.experiments.config import experiment_config
    from shoal.launch.experiments.runner import run_experiment

    config = experiment_config("ppo", SPREAD, max_env_steps=1500, progress=False, num_envs=4)
    result = run_experiment(config)
    assert "launcher" not in result and result["env_steps"] >= 1500 and result["learner_steps"] > 0, result
    assert np.isfinite(result["final_eval_return"])
