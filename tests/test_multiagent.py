"""PettingZoo envs as vector envs of (env copy, agent) rows (``shoal.actors.multiagent``).

A policy shared by every agent learns a game whose best joint policy needs the agents to act
differently (``tests.multiagent_envs``: *pick different*), because each row carries its agent's
identity; without it the same policy cannot. Bad envs are one line, before anything starts.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("pettingzoo")

from shoal.actors import make_vector_env  # noqa: E402
from shoal.actors.environments import environment_spec  # noqa: E402
from shoal.actors.multiagent import AgentRows, env_maker  # noqa: E402
from shoal.launch import run_experiment  # noqa: E402
from shoal.launch.experiments.config import experiment_config  # noqa: E402
from tests.shoal_cli import run_shoal  # noqa: E402

TOY = "pettingzoo:tests.multiagent_envs"


def test_rows_are_copies_times_agents_with_each_agents_identity_and_same_step_autoreset():
    env = make_vector_env(TOY, 3, seed=0, env_args={"length": 4})
    assert env.num_envs == 6 and environment_spec(TOY, 3, {"length": 4}).num_envs == 6
    obs, _ = env.reset(seed=0)
    assert obs.shape == (6, 3)  # (the observation, then a one-hot of the agent: a, b)
    np.testing.assert_array_equal(obs[:, 1:], np.tile(np.eye(2, dtype=np.float32), (3, 1)))
    for t in range(1, 5):
        obs, reward, terminated, truncated, info = env.step(np.array([0, 1, 0, 0, 1, 0]))
        np.testing.assert_array_equal(reward, [1, 1, 0, 0, 1, 1])  # (copy by copy: picks differ or not)
    assert terminated.all() and not truncated.any()
    assert [float(o[0]) for o in info["final_obs"]] == [0.0] * 6  # (no steps left)
    np.testing.assert_array_equal(obs[:, 0], np.ones(6))  # (the next episode's first observation)
    env.close()


def trained(tmp_path, name: str, agent_ids: bool = True) -> dict:
    config = experiment_config("ppo", TOY, preset=None, agent_settings={}, seed=0, max_env_steps=12_000,
                               num_envs=8, eval_every=4000, eval_episodes=4, target_return=9.5,
                               run_dir=str(tmp_path / name), progress=False, replay="native")
    return run_experiment(config)


@pytest.mark.e2e
def test_a_policy_shared_by_both_agents_learns_to_coordinate_in_one_process(tmp_path):
    """Random picks earn 5 of 10; the shared policy, told which agent it acts for, earns 10."""
    import csv

    result = trained(tmp_path, "shared")
    assert result["solved"], result
    assert result["final_eval_return"] >= 9.5
    with open(tmp_path / "shared" / "eval.csv") as f:
        last = list(csv.DictReader(f))[-1]  # (each agent's return, and the team's: their sum)
    assert float(last["eval_return_a"]) >= 9.5 and float(last["eval_return_b"]) >= 9.5
    assert float(last["eval_team_return"]) == float(last["eval_return_a"]) + float(last["eval_return_b"])


def test_without_the_agents_identity_one_policy_cannot_tell_the_agents_apart():
    """(Why identities are on by default.) Both rows of a copy see the same observation: any
    policy of the observation alone gives both agents the same distribution of picks."""
    env = AgentRows(env_maker(TOY), 2, seed=0, agent_ids=False)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (4, 1)
    np.testing.assert_array_equal(obs[0::2], obs[1::2])
    env.close()


@pytest.mark.parametrize("env_id, message", [
    (f"{TOY}:mixed_spaces_env", "agents a and b have different observation spaces"),
    ("pettingzoo:no_such_module_here", "cannot import no_such_module_here"),
    (f"{TOY}:no_such_function", "has no function 'no_such_function'"),
    ("pettingzoo:tests.shoal_cli", "has neither parallel_env"),
])
def test_bad_multiagent_envs_are_one_line_and_exit_2_before_anything_starts(tmp_path, env_id, message):
    proc = run_shoal("train", "--agent", "ppo", "--env", env_id, "--run-dir", str(tmp_path / "run"), timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("shoal: error:")]
    assert len(lines) == 1 and message in lines[0], proc.stderr
    assert not (tmp_path / "run").exists()


def test_an_agent_that_leaves_mid_episode_ends_its_row_and_is_absent_until_its_copy_resets():
    env = make_vector_env(f"{TOY}:leaving_env", 1, seed=0)
    obs, _ = env.reset(seed=0)
    for t in range(1, 11):
        obs, reward, terminated, truncated, info = env.step(np.array([0, 1]))
        if t < 5:
            assert reward.tolist() == [1, 1] and not terminated.any()
        elif t == 5:  # (b leaves: its row ends, with its last observation)
            assert terminated.tolist() == [False, True] and float(info["final_obs"][1][0]) == 0.5
            np.testing.assert_array_equal(obs[1], [0, 0, 1])  # (absent: zeros, its identity kept)
        elif t < 10:  # (a plays on alone; b's row: reward 0, never ending, absent)
            assert reward.tolist() == [0, 0] and not terminated.any()
            np.testing.assert_array_equal(obs[1], [0, 0, 1])
    assert terminated.tolist() == [True, False]  # (a's episode ends; the copy resets: b plays again)
    np.testing.assert_array_equal(obs, [[1, 1, 0], [1, 0, 1]])
    env.close()


@pytest.mark.e2e
def test_ppo_with_an_agent_that_leaves_and_masks_never_sends_a_forbidden_action_nor_loses_to_nan(tmp_path):
    """The env raises on an action its mask forbids or one for an agent that left; an absent
    row's mask allows action 0 alone (never sent). The run ends and every loss is finite."""
    import csv

    config = experiment_config("ppo", f"{TOY}:masked_leaving_env", preset=None, agent_settings={}, seed=0,
                               max_env_steps=6000, num_envs=4, eval_every=3000, eval_episodes=2,
                               target_return=1e9, run_dir=str(tmp_path / "run"), progress=False, replay="native")
    result = run_experiment(config)
    assert result["learner_steps"] > 0
    with open(tmp_path / "run" / "learner.csv") as f:
        losses = [float(row["loss"]) for row in csv.DictReader(f)]
    assert losses and all(np.isfinite(losses))


def test_an_aec_env_whose_agents_act_in_turns_is_refused_in_one_line():
    pytest.importorskip("pettingzoo.classic.connect_four_v3")
    with pytest.raises(ValueError, match="AEC env that cannot be converted to the parallel API"):
        env_maker("pettingzoo:pettingzoo.classic.connect_four_v3")()


@pytest.mark.e2e
@pytest.mark.parametrize("agent, launcher", [("dqn", None), ("ppo", "processes")])
def test_other_agents_and_launchers_step_the_rows_as_any_vector_env(tmp_path, agent, launcher):
    """DQN in one process, PPO over actor processes (each actor and the evaluator build their
    own rows; the driver reads the spec off one copy): the run ends, its learner updated, and
    its env steps count rows (2 agents a copy)."""
    budget = 3000 if agent == "dqn" else 20_000  # (PPO's rollouts: 128 steps of 16 rows an actor)
    args = ["train", "--agent", agent, "--env", TOY, "--env-arg", "length=8", "--max-env-steps", str(budget),
            "--eval-every", str(budget // 2), "--target-return", "1e9", "--quiet", "--run-dir", str(tmp_path / "run")]
    if agent == "dqn":
        args += ["--set", "min_replay_size=500"]
    if launcher:
        args += ["--launcher", launcher, "--num-actors", "2"]
    done = run_shoal(*args, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["learner_steps"] > 0 and result["env_steps"] >= budget
    assert 0.0 <= result["final_eval_return"] <= 8.0


def test_videos_of_a_multiagent_env_are_refused_in_one_line(tmp_path):
    proc = run_shoal("train", "--agent", "ppo", "--env", TOY, "--video-every", "1",
                     "--run-dir", str(tmp_path / "run"), timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "--video-every records single-agent envs" in proc.stderr
    assert not (tmp_path / "run").exists()
