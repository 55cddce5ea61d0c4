"""PettingZoo envs as vector envs of (env copy, agent) rows (``shoal.envs.multiagent``).

A policy shared by every agent learns a game whose best joint policy needs the agents to act
differently (``tests.multiagent_envs``: *pick different*), because each row carries its agent's
identity; without it the same policy cannot. Bad envs are one line, before anything starts.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("pettingzoo")

from shoal.envs import make_vector_env  # noqa: E402
from shoal.envs.environments import environment_spec  # noqa: E402
from shoal.envs.multiagent import AgentRows, env_maker  # noqa: E402
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
    for _t in range(1, 5):
        obs, reward, terminated, truncated, info = env.step(np.array([0, 1, 0, 0, 1, 0]))
        np.testing.assert_array_equal(reward, [1, 1, 0, 0, 1, 1])  # (copy by copy: picks differ or not)
    assert terminated.all() and not truncated.any()
    assert [float(o[0]) for o in info["final_obs"]] == [0.0] * 6  # (no steps left)
    np.testing.assert_array_equal(obs[:, 0], np.ones(6))  # (the next episode's first observation)
    env.close()


def trained(tmp_path, name: str, agent_ids: bool = True) -> dict:
    config = experiment_config(
        "ppo",
        TOY,
        preset=None,
        agent_settings={},
        seed=0,
        max_env_steps=12_000,
        num_envs=8,
        eval_every=4000,
        eval_episodes=4,
        target_return=9.5,
        run_dir=str(tmp_path / name),
        progress=False,
        replay="native",
    )
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


@pytest.mark.e2e
def test_shoal_evaluate_of_a_many_agent_run_reports_each_episode_of_an_env_copy_its_agents_together(tmp_path, capsys):
    """An evaluation's episodes are env copies (each of 2 agents' rows): a copy's return is its
    agents' sum, its length the longest agent's (3 copies in a round: 6 rows, not 3)."""
    from shoal.launch.experiments.cli.main import main

    run_dir = str(tmp_path / "run")
    run_experiment(
        experiment_config(
            "ppo",
            TOY,
            preset=None,
            agent_settings={},
            seed=0,
            max_env_steps=1_000,
            num_envs=4,
            eval_every=1_000,
            eval_episodes=2,
            run_dir=run_dir,
            progress=False,
            replay="native",
            env_args={"length": 4},
        )
    )
    capsys.readouterr()
    assert main(["evaluate", run_dir, "--env", TOY, "--episodes", "3", "--seed", "0"]) == 0, capsys.readouterr().err
    result = json.loads(capsys.readouterr().out)
    assert result["episodes"] == 3 and result["agents"] == ["a", "b"], result
    assert result["length"] == {"mean": 4.0, "std": 0.0, "median": 4.0, "min": 4.0, "max": 4.0}
    stats = result["return"]  # (both agents earn 1 a step when their picks differ: an even sum, at most 8)
    assert 0 <= stats["min"] <= stats["max"] <= 8 and stats["max"] % 2 == 0 and stats["mean"] * 3 % 2 == 0, result


def test_without_the_agents_identity_one_policy_cannot_tell_the_agents_apart():
    """(Why identities are on by default.) Both rows of a copy see the same observation: any
    policy of the observation alone gives both agents the same distribution of picks."""
    env = AgentRows(env_maker(TOY), 2, seed=0, agent_ids=False)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (4, 1)
    np.testing.assert_array_equal(obs[0::2], obs[1::2])
    env.close()


@pytest.mark.e2e  # (`shoal train` in a subprocess, as a user types it)
@pytest.mark.parametrize(
    "env_id, message",
    [
        (f"{TOY}:mixed_spaces_env", "agents a and b have different observation spaces"),
        ("pettingzoo:no_such_module_here", "cannot import no_such_module_here"),
        (f"{TOY}:no_such_function", "has no function 'no_such_function'"),
        ("pettingzoo:tests.shoal_cli", "has neither parallel_env"),
        (f"{TOY} --agent-group a=x --agent-group c=y", "agent group pattern 'c' (-> 'y') names no agent"),
        (f"{TOY}:mixed_actions_env --agent-group *=x", "group 'x' shares one policy, so its agents' spaces"),
        (f"{TOY} --global-state", "gives no global state (PettingZoo's state() and a Box state_space)"),
        (f"{TOY}:state_env --global-state --set lstm_size=8", "--global-state feeds a centralised critic; ppo's"),
    ],
)
def test_bad_multiagent_envs_are_one_line_and_exit_2_before_anything_starts(tmp_path, env_id, message):
    env_id, *groups = env_id.split()
    proc = run_shoal(
        "train", "--agent", "ppo", "--env", env_id, *groups, "--run-dir", str(tmp_path / "run"), timeout=120
    )
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


def test_agents_that_leave_with_no_termination_nor_truncation_are_one_line_naming_the_env():
    """(Else each row plays one episode forever: an evaluation never ends.)"""
    env = make_vector_env(f"{TOY}:vanishing_env", 1, seed=0)
    env.reset(seed=0)
    for _ in range(9):
        env.step(np.array([0, 1]))
    with pytest.raises(
        RuntimeError,
        match=r"^pettingzoo:tests.multiagent_envs:vanishing_env: agents a, b left "
        r"\(no longer in its agents\) after step 10 of an episode with no "
        r"termination nor truncation",
    ):
        env.step(np.array([0, 1]))
    env.close()


@pytest.mark.e2e  # (`shoal train` in a subprocess, as a user types it)
def test_a_run_on_an_env_whose_agents_vanish_ends_in_one_line_instead_of_hanging(tmp_path):
    proc = run_shoal(
        "train",
        "--agent",
        "ppo",
        "--env",
        f"{TOY}:vanishing_env",
        "--max-env-steps",
        "4000",
        "--run-dir",
        str(tmp_path / "run"),
        timeout=150,
    )
    assert proc.returncode == 1, proc.stderr[-2000:]
    lines = [line for line in proc.stderr.splitlines() if line.startswith("shoal: error:")]
    assert len(lines) == 1 and "vanishing_env: agents a, b left" in lines[0], proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "env_id, message",
    [
        ("pettingzoo:os:system", "environment 'pettingzoo:os:system': os is a module of Python's standard library"),
        ("pettingzoo:os", "environment 'pettingzoo:os': os is a module of Python's standard library"),
        ("pettingzoo:tests.user_envs:shell", "environment 'pettingzoo:tests.user_envs:shell': shell is os.system"),
        ("pettingzoo:tests.user_envs:make_folder", "make_folder is os.makedirs, a function of Python's standard"),
    ],
)
def test_an_env_source_that_is_no_pettingzoo_env_is_refused_before_it_is_called(tmp_path, env_id, message):
    from tests.faults.harness import shoal_main

    marker = tmp_path / "called"
    args = (
        ["--env-arg", f"command='touch {marker}'"]
        if env_id.endswith("system") or env_id.endswith("shell")
        else (["--env-arg", f"name='{marker}'"] if env_id.endswith("make_folder") else [])
    )
    rc, errors, text = shoal_main(
        "train", "--agent", "ppo", "--env", env_id, *args, "--run-dir", str(tmp_path / "run"), "--quiet"
    )
    assert rc == 2 and len(errors) == 1 and message in errors[0], text
    assert not marker.exists() and not (tmp_path / "run").exists()


def test_an_argument_a_users_env_function_refuses_is_one_line_naming_the_env_and_the_argument(tmp_path):
    from tests.faults.harness import shoal_main

    rc, errors, text = shoal_main(
        "train",
        "--agent",
        "ppo",
        "--env",
        f"{TOY}:any_args_env",
        "--env-arg",
        "bogus=1",
        "--run-dir",
        str(tmp_path / "run"),
        "--quiet",
    )
    assert rc == 2 and errors == [
        f"shoal: error: environment '{TOY}:any_args_env' with arguments {{'bogus': 1}}: TypeError: "
        "PickDifferent.__init__() got an unexpected keyword argument 'bogus'"
    ], text
    assert not (tmp_path / "run").exists()


@pytest.mark.e2e
def test_ppo_with_an_agent_that_leaves_and_masks_never_sends_a_forbidden_action_nor_loses_to_nan(tmp_path):
    """The env raises on an action its mask forbids or one for an agent that left; an absent
    row's mask allows action 0 alone (never sent). The run ends and every loss is finite."""
    import csv

    config = experiment_config(
        "ppo",
        f"{TOY}:masked_leaving_env",
        preset=None,
        agent_settings={},
        seed=0,
        max_env_steps=6000,
        num_envs=4,
        eval_every=3000,
        eval_episodes=2,
        target_return=1e9,
        run_dir=str(tmp_path / "run"),
        progress=False,
        replay="native",
    )
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
    """DQN in one process, PPO over actor processes with a policy per agent (each actor and the
    evaluator build their own rows; the driver reads the spec off one copy; the groups'
    parameters travel to the actors as one set): the run ends, its learner updated, and
    its env steps count rows (2 agents a copy)."""
    budget = 3000 if agent == "dqn" else 20_000  # (PPO's rollouts: 128 steps of 16 rows an actor)
    args = [
        "train",
        "--agent",
        agent,
        "--env",
        TOY,
        "--env-arg",
        "length=8",
        "--max-env-steps",
        str(budget),
        "--eval-every",
        str(budget // 2),
        "--target-return",
        "1e9",
        "--quiet",
        "--run-dir",
        str(tmp_path / "run"),
    ]
    if agent == "dqn":
        args += ["--set", "min_replay_size=500"]
    if launcher:
        args += ["--launcher", launcher, "--num-actors", "2", "--agent-group", "a=x", "--agent-group", "b=y"]
    done = run_shoal(*args, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["learner_steps"] > 0 and result["env_steps"] >= budget
    assert 0.0 <= result["final_eval_return"] <= 8.0


# -- a policy per group of agents -----------------------------------------------------------------


def test_a_grouped_network_answers_each_row_with_its_groups_parameters_and_learns_from_its_rows_only():
    """Three agents in two groups (a: 0; b, c: 1), two rows each. Row by row, the output is the
    module's on the row's group's parameters (a Gaussian policy's shared log-std too, with as
    many rows as action dimensions); a loss of group 0's rows moves group 0's parameters only."""
    import jax
    import jax.numpy as jnp

    from shoal.agents.components.groups import GroupedNetwork
    from shoal.agents.components.networks import ActorCritic, GaussianActorCritic

    agents = np.tile(np.eye(3, dtype=np.float32), (2, 1))  # (rows: a, b, c, a, b, c)
    obs = np.concatenate([np.random.default_rng(0).normal(size=(6, 4)).astype(np.float32), agents], axis=1)
    group_of_row = [0, 1, 1, 0, 1, 1]
    for inner, rows in ((ActorCritic((8,), 3), obs), (GaussianActorCritic((8,), 2), obs[:2])):
        grouped = GroupedNetwork(inner, [0, 1, 1], 2, "tail")
        params = grouped.init(jax.random.PRNGKey(0), rows[:1])
        if "log_std" in params["params"]:  # (each group's own: 0 and 1, for as many rows as dimensions)
            params["params"]["log_std"] = params["params"]["log_std"] + jnp.arange(2.0)[:, None]
        out = jax.jit(grouped.apply)(params, rows)
        inner_apply = jax.jit(inner.apply)  # (one compile, not one per op and row)
        for r, g in enumerate(group_of_row[: len(rows)]):
            own = inner_apply(jax.tree_util.tree_map(lambda p, g=g: np.asarray(p)[g], params), rows[r : r + 1])
            for got, want in zip(jax.tree_util.tree_leaves(out), jax.tree_util.tree_leaves(own)):
                want = want[0] if want.shape[:1] == (1,) else want  # (a row's output, or one for all rows)
                assert got.shape == (len(rows), *want.shape)
                np.testing.assert_allclose(got[r], want, rtol=1e-5, atol=1e-6)
    grouped = GroupedNetwork(ActorCritic((8,), 3), [0, 1, 1], 2, "tail")
    params = grouped.init(jax.random.PRNGKey(1), obs[:1])
    in_group_0 = jnp.asarray(group_of_row) == 0
    grads = jax.jit(jax.grad(lambda p: jnp.sum(jnp.where(in_group_0, grouped.apply(p, obs)[1], 0.0))))(params)
    for leaf in jax.tree_util.tree_leaves(grads):
        assert not np.any(np.asarray(leaf[1])), "group 1's parameters got a gradient from group 0's rows"
    assert any(np.any(np.asarray(leaf[0])) for leaf in jax.tree_util.tree_leaves(grads))


@pytest.mark.e2e
def test_a_policy_per_group_learns_agents_of_different_spaces_each_group_with_its_own_parameters(tmp_path):
    """*Pick different* with ``b`` seeing 2 numbers and picking among 3 (``a``: 1 and 2; the env
    raises on an action outside the agent's space): agents of different spaces in their own
    groups, rows padded to one layout, ``a``'s padded action masked. Solved; the run's saved
    parameters are one set per group (a leading axis of 2), and the groups' differ."""
    import jax

    from shoal.launch.experiments.trained_policy import load_policy

    config = experiment_config(
        "ppo",
        f"{TOY}:mixed_actions_env",
        preset=None,
        agent_settings={},
        seed=0,
        max_env_steps=12_000,
        num_envs=8,
        eval_every=4000,
        eval_episodes=4,
        target_return=9.5,
        run_dir=str(tmp_path / "run"),
        progress=False,
        replay="native",
        agent_groups={"a": "first", "b": "second"},
    )
    result = run_experiment(config)
    assert result["solved"] and result["final_eval_return"] >= 9.5, result
    policy = load_policy(str(tmp_path / "run"), env_id=f"{TOY}:mixed_actions_env")  # (named again: it imports)
    assert policy.config.multiagent.agent_groups == {"a": "first", "b": "second"}  # (config.json keeps the mapping)
    leaves = jax.tree_util.tree_leaves(policy.params["network"])
    assert leaves and all(leaf.shape[0] == 2 for leaf in leaves)
    assert any(not np.allclose(leaf[0], leaf[1]) for leaf in leaves)
    env = make_vector_env(f"{TOY}:mixed_actions_env", 4, seed=1)
    obs, _ = env.reset(seed=1)
    for _ in range(10):  # (greedy: a and b pick differently in every copy; a never picks 2)
        actions = policy(obs)
        assert np.all(actions[0::2] != actions[1::2]) and np.all(actions[0::2] < 2)
        obs, *_ = env.step(actions)
    env.close()


def test_a_padded_gaussian_entry_cancels_in_the_ratio_and_gets_no_gradient():
    """PPO's ``masked`` on a Gaussian: an action entry not in use adds the same log-probability
    under any parameters (so the ratio is the entries' in use alone) and no gradient."""
    import jax
    import jax.numpy as jnp

    from shoal.agents.components import distributions
    from shoal.agents.ppo.learning import masked

    mask, action = jnp.array([[True, False]]), jnp.array([[0.2, 0.9]])

    def log_prob(mean, log_std):
        return distributions.gaussian_log_prob(*masked((mean, log_std), mask), action)[0]

    old, new = (jnp.array([[0.0, 0.0]]), jnp.array([0.0, 0.0])), (jnp.array([[0.3, -0.8]]), jnp.array([0.1, 0.5]))
    in_use = (
        distributions.gaussian_log_prob(new[0][:, :1], new[1][:1], action[:, :1])[0]
        - distributions.gaussian_log_prob(old[0][:, :1], old[1][:1], action[:, :1])[0]
    )
    np.testing.assert_allclose(log_prob(*new) - log_prob(*old), in_use, rtol=1e-5)
    grads = jax.grad(lambda p: log_prob(*p) + distributions.gaussian_entropy(*masked(p, mask))[0])(new)
    assert grads[0][0, 1] == 0 and grads[1][1] == 0 and grads[0][0, 0] != 0


@pytest.mark.e2e
def test_ppo_learns_agents_of_different_continuous_action_sizes_each_given_its_own_entries(tmp_path):
    """*Reach targets* (``a``: 1 action entry, ``b``: 2; the env raises on an action of another
    shape): one group per agent, actions padded to 2 entries with a mask of each row's own.
    PPO's greedy policy comes near both targets: ``b`` with both its entries (with one left at
    0 its return could not pass -2.5; a policy at 0 scores -2.5 for ``a``, -5 for ``b``)."""
    import csv

    config = experiment_config(
        "ppo",
        f"{TOY}:reach_env",
        preset=None,
        agent_settings={},
        seed=0,
        max_env_steps=10_000,
        num_envs=8,
        eval_every=5_000,
        eval_episodes=4,
        target_return=1e9,
        progress=False,
        replay="native",
        run_dir=str(tmp_path / "run"),
        agent_groups={"a": "one", "b": "two"},
    )
    env = config.make_env(2, 0)
    assert env.single_action_space.shape == (2,)
    obs, _ = env.reset(seed=0)
    assert obs["action_mask"].tolist() == [[1, 0], [1, 1], [1, 0], [1, 1]]
    env.close()
    result = run_experiment(config)
    with open(tmp_path / "run" / "eval.csv") as f:
        last = list(csv.DictReader(f))[-1]
    assert float(last["eval_return_a"]) > -0.5 and float(last["eval_return_b"]) > -1.0, (last, result)


def test_padded_continuous_actions_reach_each_agent_cut_and_clipped_to_its_own_space():
    """``a`` moves 1 number in [-1, 1], ``b`` 2 in [-3, 3]: the rows' layout is 2 numbers in
    [-3, 3]; ``a`` gets its first entry clipped to its own bounds, an absent row's mask names no
    entry; and with equal sizes but different bounds there is no mask, each agent clipped to its own."""
    env = AgentRows(env_maker(f"{TOY}:reach_env", {"a_bound": 1.0}), 1, seed=0)
    assert env.single_action_space == __import__("gymnasium").spaces.Box(-3.0, 3.0, (2,), np.float32)
    obs, _ = env.reset(seed=0)
    assert obs["action_mask"].tolist() == [[1, 0], [1, 1]]
    env.step(np.array([[2.5, -2.0], [2.5, -2.0]], np.float32))
    sent = env.envs[0].last_actions
    assert sent["a"].tolist() == [1.0] and sent["b"].tolist() == [2.5, -2.0]
    assert env._absent(0)["action_mask"].tolist() == [0, 0]
    same_size = AgentRows(env_maker(f"{TOY}:reach_env", {"a_bound": 1.0, "b_size": 1}), 1, seed=0)
    obs, _ = same_size.reset(seed=0)
    assert "action_mask" not in obs
    same_size.step(np.array([[2.5], [2.5]], np.float32))
    assert same_size.envs[0].last_actions["a"].tolist() == [1.0] and same_size.envs[0].last_actions["b"].tolist() == [
        2.5
    ]


def test_ppo_acts_0_in_an_action_entry_not_in_use():
    """PPO's sampling policy on *reach targets*: ``a``'s padded entry is 0 in every sample (the
    env would see it where it is not cut off), ``b``'s entries are drawn."""
    import jax

    from shoal.core.specs import make_environment_spec
    from shoal.core.types import ActorInfo

    config = experiment_config(
        "ppo", f"{TOY}:reach_env", preset=None, agent_settings={}, agent_groups={"a": "one", "b": "two"}
    )
    env = config.make_env(4, 0)
    spec = make_environment_spec(env)
    networks = config.make_networks(spec)
    policy = config.builder.make_policy(networks, spec, evaluation=False)
    params = config.builder.init_state(jax.random.PRNGKey(0), networks).params
    obs, _ = env.reset(seed=0)
    actions, extras, _ = policy.apply(params, jax.random.PRNGKey(1), obs, ActorInfo(0, 0))
    actions = np.asarray(actions)
    assert np.all(actions[0::2, 1] == 0) and np.all(actions[1::2] != 0) and np.all(np.isfinite(extras["log_prob"]))
    env.close()


def test_sac_refuses_agents_of_different_continuous_action_sizes_in_one_line():
    config = experiment_config(
        "sac", f"{TOY}:reach_env", preset=None, agent_settings={}, agent_groups={"a": "one", "b": "two"}
    )
    with pytest.raises(ValueError, match="sac does not read an action_mask of continuous actions"):
        config.validate_agent(config.environment_spec(), check_memory=False)


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"agent_groups": {"a": "x"}}, "agent 'b' of pettingzoo:tests.multiagent_envs is in no group"),
        ({"agent_groups": {"?": "x", "b": "y"}}, "agent 'b' of pettingzoo:tests.multiagent_envs is put in groups x, y"),
        ({"agent_groups": {"*": "x"}, "agent_ids": False}, "drop --no-agent-ids"),
        ({"agent_groups": {"*": "x"}, "env_id": "CartPole-v1"}, "for a PettingZoo env \\(pettingzoo:<module>\\) only"),
    ],
)
def test_bad_agent_groups_are_one_line_errors_before_anything_starts(changes, message):
    config = experiment_config("ppo", changes.pop("env_id", TOY), preset=None, agent_settings={}, **changes)
    with pytest.raises(ValueError, match=message):
        config.validate_settings()


def test_a_policy_per_group_refuses_a_recurrent_network_in_one_line():
    config = experiment_config(
        "ppo", TOY, preset=None, agent_settings={"lstm_size": 16}, agent_groups={"a": "x", "b": "y"}
    )
    with pytest.raises(ValueError, match="a policy per group takes feed-forward networks"):
        config.make_networks(config.environment_spec())


# -- a centralised critic (MAPPO) -----------------------------------------------------------------


def test_a_centralised_critic_reads_the_global_state_and_the_policy_does_not():
    """``--global-state``: each row carries its copy's ``state()``; the actor-critic's value head
    reads it, its policy head (what the actors act with) does not."""
    import jax

    from shoal.agents.components.dict_observations import observation_keys
    from shoal.agents.components.networks import DictActorCritic
    from shoal.envs.multiagent import GLOBAL_STATE

    spec = environment_spec(f"{TOY}:state_env", 2, global_state=True)
    assert spec.observation[GLOBAL_STATE].shape == (2,)
    env = make_vector_env(f"{TOY}:state_env", 2, seed=0, global_state=True)
    obs, _ = env.reset(seed=0)
    obs, *_ = env.step(np.array([0, 1, 0, 1]))
    np.testing.assert_allclose(obs[GLOBAL_STATE], [[0.9, 0.1]] * 4)  # (every row of a copy: its state)
    env.close()
    network = DictActorCritic(observation_keys(spec.observation), (16,), 2)
    params = network.init(jax.random.PRNGKey(0), {k: v[:1] for k, v in obs.items()})
    other = {**obs, GLOBAL_STATE: obs[GLOBAL_STATE] + 1.0}
    (logits, value), (other_logits, other_value) = network.apply(params, obs), network.apply(params, other)
    np.testing.assert_array_equal(logits, other_logits)
    assert not np.allclose(value, other_value)


@pytest.mark.e2e
def test_ppo_with_a_centralised_critic_learns_the_coordination_game(tmp_path):
    config = experiment_config(
        "ppo",
        f"{TOY}:state_env",
        preset=None,
        agent_settings={},
        seed=0,
        max_env_steps=12_000,
        num_envs=8,
        eval_every=4000,
        eval_episodes=4,
        target_return=9.5,
        run_dir=str(tmp_path / "run"),
        progress=False,
        replay="native",
        global_state=True,
    )
    result = run_experiment(config)
    assert result["solved"] and result["final_eval_return"] >= 9.5, result


def test_agents_without_a_centralised_critic_refuse_the_global_state_in_one_line():
    config = experiment_config("dqn", f"{TOY}:state_env", preset=None, agent_settings={}, global_state=True)
    with pytest.raises(ValueError, match="dqn's networks \\(QNetwork\\) have none"):
        config.make_networks(config.environment_spec())


@pytest.mark.e2e
def test_a_run_with_groups_resumes_with_its_groups_and_shoal_compare_reads_multiagent_runs(tmp_path):
    """A run with a policy per agent stops at its budget; ``--resume`` with a larger one goes on
    from its checkpoint with the same groups (``config.json``; the parameters still one set per
    group). ``shoal compare`` takes multi-agent runs as any others (two seeds here)."""
    import jax

    from shoal.launch.experiments.trained_policy import load_policy

    def train(run: str, seed: int, budget: int, *more: str) -> dict:
        done = run_shoal(
            "train",
            "--agent",
            "ppo",
            "--env",
            TOY,
            "--seed",
            str(seed),
            "--max-env-steps",
            str(budget),
            "--eval-every",
            "2000",
            "--target-return",
            "1e9",
            "--quiet",
            "--run-dir",
            str(tmp_path / run),
            "--replay",
            "native",
            *more,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    groups = ("--agent-group", "a=x", "--agent-group", "b=y")
    first = train("r0", 0, 4000, *groups)
    resumed = run_shoal(
        "train", "--resume", str(tmp_path / "r0"), "--env", TOY, "--max-env-steps", "8000", "--quiet", timeout=300
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    second = json.loads(resumed.stdout.strip().splitlines()[-1])
    assert second["env_steps"] >= 8000 and second["learner_steps"] > first["learner_steps"]
    policy = load_policy(str(tmp_path / "r0"), env_id=TOY)
    assert policy.config.multiagent.agent_groups == {"a": "x", "b": "y"}
    assert all(leaf.shape[0] == 2 for leaf in jax.tree_util.tree_leaves(policy.params["network"]))
    train("r1", 1, 4000, *groups)
    compared = run_shoal(
        "compare",
        str(tmp_path / "r0"),
        str(tmp_path / "r1"),
        "--out",
        str(tmp_path / "cmp"),
        "--bootstrap-samples",
        "200",
        timeout=300,
    )
    assert compared.returncode == 0, compared.stderr[-3000:]
    assert "ppo" in compared.stdout and (tmp_path / "cmp" / "summary.json").exists()
