"""Actors that overlap (``EnvironmentLoop(overlap=...)``, ``shoal.envs.stepping``): the env
stepped in a thread or a worker process gives the same transitions, final observations and
episode stats as the plain loop for a fixed seed; the overlapped run is the same run twice when
the params change; every wait is bounded and ends in one line; workers end with the loop."""

import gc
import json
import os
import time

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from shoal.actors import BatchedActor, EnvironmentLoop, VariableClient
from shoal.core.types import Policy
from shoal.envs import make_vector_env
from shoal.envs.stepping import ProcessStepper, check_overlap, resolve_overlap
from shoal.launch import EnvConfig
from shoal.launch.experiments.cli.main import main
from tests.test_prefetch import Recorder, Versions

NUM_ENVS, STEPS = 4, 80


def random_policy(recurrent: bool) -> Policy:
    """Random actions (every step's key shows), extras of what the policy was given."""

    def apply(params, key, observation, info, state=None):
        key, action_key = jax.random.split(key)
        n = observation.shape[0]
        extras = {"env_steps": jnp.full(n, info.env_steps), "version": jnp.full(n, info.params_version)}
        actions = jax.random.randint(action_key, (n,), 0, 2)
        if state is None:
            return actions, extras, key
        return actions, {**extras, "age": state}, key, state + 1

    initial = (lambda n: jnp.zeros(n, jnp.int32)) if recurrent else None
    return Policy(apply=apply, initial_state=initial)


def run(env_id: str, overlap: str, recurrent: bool = False, period: int = 10**9, steps: int = STEPS):
    """The recorded steps and log rows of a seeded loop; the loop's resolved overlap."""
    env = make_vector_env(env_id, NUM_ENVS, seed=3)
    recorder = Recorder()
    client = VariableClient(Versions(period), asynchronous=False)
    actor = BatchedActor(random_policy(recurrent), jax.random.PRNGKey(7), client, recorder, num_envs=NUM_ENVS)
    loop = EnvironmentLoop(env, actor, overlap=overlap)
    rows = []
    try:
        for i in range(steps):
            loop.step()
            if i % 20 == 19:
                rows.append({k: v for k, v in loop.log().items() if k.startswith("episode_") or k == "env_steps"})
    finally:
        loop.close()
        env.close()
    return recorder.steps, rows, loop.overlap


def assert_same(a, b, episodes: bool = True) -> None:
    steps_a, rows_a, _ = a
    steps_b, rows_b, _ = b
    assert len(steps_a) == len(steps_b) == STEPS
    ended = 0
    for x, y in zip(steps_a, steps_b, strict=True):
        for leaf_x, leaf_y in zip(jax.tree_util.tree_leaves(x), jax.tree_util.tree_leaves(y), strict=True):
            np.testing.assert_array_equal(np.asarray(leaf_x), np.asarray(leaf_y))
        ended += int(np.sum(np.asarray(x.terminated) | np.asarray(x.truncated)))
    assert rows_a == rows_b
    if episodes:  # (episodes ended: final observations, autoresets and episode stats were compared)
        assert ended > 0 and any("episode_return" in row for row in rows_a)


@pytest.mark.parametrize(
    "overlap",
    ["thread", pytest.param("process", marks=pytest.mark.e2e)],  # (a worker process each: ~1.5 s)
)
@pytest.mark.parametrize("recurrent", [False, True])
def test_overlapped_loop_steps_the_same_transitions(overlap, recurrent):
    """CartPole (its episodes end within the run): every field of every step, the final
    observations, and the episode returns and lengths logged are the plain loop's."""
    plain = run("CartPole-v1", "off", recurrent)
    overlapped = run("CartPole-v1", overlap, recurrent)
    assert overlapped[2] == overlap
    assert_same(plain, overlapped)


@pytest.mark.e2e  # (three loops, two of them with a worker process)
def test_overlapped_loop_is_the_same_run_twice_when_params_change():
    """With params that change every 3 fetches the overlapped loop acts with the params before
    each ``update`` (so its versions differ from the plain loop's), and is the same run twice."""
    first, second = run("CartPole-v1", "process", period=3), run("CartPole-v1", "process", period=3)
    assert_same(first, second)
    plain = run("CartPole-v1", "off", period=3)
    versions = [np.asarray(s.extras["version"])[0] for s in first[0]]
    assert versions != [np.asarray(s.extras["version"])[0] for s in plain[0]]
    assert versions == sorted(versions) and versions[-1] > 0


def test_envpool_thread_overlap_steps_the_same_transitions():
    pytest.importorskip("envpool")
    plain = run("envpool:CartPole-v1", "off")
    overlapped = run("envpool:CartPole-v1", "thread")
    assert_same(plain, overlapped)


@pytest.mark.e2e  # (two Pong vector envs: ~3 s)
def test_atari_thread_overlap_steps_the_same_frames():
    """ale-py's vector env (auto's thread): the same frames, rewards and actions (no episode of
    Pong ends within the run)."""
    pytest.importorskip("ale_py")
    plain = run("ALE/Pong-v5", "off", steps=STEPS)
    overlapped = run("ALE/Pong-v5", "auto", steps=STEPS)
    assert overlapped[2] == "thread"
    assert_same(plain, overlapped, episodes=False)


def test_auto_picks_by_env_family():
    env = make_vector_env("CartPole-v1", 2, seed=0)
    assert resolve_overlap("auto", env) == "off" and resolve_overlap("process", env) == "process"
    env.close()
    pytest.importorskip("envpool")
    for env_id, expected in (("envpool:CartPole-v1", "off"), ("envpool:Pong-v5", "thread")):
        env = make_vector_env(env_id, 2, seed=0)
        assert resolve_overlap("auto", env) == expected, env_id
        env.close()


def test_bad_overlap_is_one_line():
    with pytest.raises(ValueError, match=r"^actor overlap 'halves' is not one of auto, off, thread, process$"):
        check_overlap("halves")
    with pytest.raises(ValueError, match="actor overlap 'x'"):
        EnvConfig("CartPole-v1", actor_overlap="x")


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, ended but not yet reaped, counts as ended)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.e2e  # (two worker processes started and ended)
def test_worker_ends_with_close_and_with_the_loop():
    env = make_vector_env("CartPole-v1", 2, seed=0)
    actor = BatchedActor(random_policy(False), jax.random.PRNGKey(0), VariableClient(Versions(10**9)), num_envs=2)
    loop = EnvironmentLoop(env, actor, overlap="process")
    loop.step()
    pid = loop._stepper.pid
    assert alive(pid)
    loop.close()
    assert not alive(pid)
    loop.close()  # (twice: nothing more)
    loop = EnvironmentLoop(env, actor, overlap="process")
    loop.step()
    pid = loop._stepper.pid
    del loop
    gc.collect()
    assert not alive(pid)  # (the finalizer ended it)


@pytest.mark.e2e  # (a worker process started and killed)
def test_a_worker_that_dies_is_one_line():
    env = make_vector_env("CartPole-v1", 2, seed=0)
    actor = BatchedActor(random_policy(False), jax.random.PRNGKey(0), VariableClient(Versions(10**9)), num_envs=2)
    loop = EnvironmentLoop(env, actor, overlap="process")
    loop.step()
    os.kill(loop._stepper.pid, 9)
    with pytest.raises(RuntimeError, match=r"env's worker process ended .*exit code -9"):
        for _ in range(3):  # (the step in flight, or the next send, finds it gone)
            loop.step()
    loop.close()


def test_an_env_that_raises_in_its_worker_is_one_line():
    env = make_vector_env("CartPole-v1", 2, seed=0)
    stepper = ProcessStepper(env)
    try:
        stepper.send(np.array([5, 5]))  # (CartPole's actions are 0 and 1)
        with pytest.raises(RuntimeError, match=r"^AssertionError: .*invalid"):
            stepper.recv(60)
        stepper.send(np.array([0, 1]))  # (the worker goes on)
        assert stepper.recv(60)[0].shape == (2, 4)
    finally:
        stepper.close()


class Stuck(gym.vector.VectorWrapper):
    """Its 3rd step takes 8 s."""

    def __init__(self, env) -> None:
        super().__init__(env)
        self.steps = 0

    def step(self, actions):
        self.steps += 1
        if self.steps == 3:
            time.sleep(8)
        return self.env.step(actions)


@pytest.mark.e2e  # (waits out its bound: 2.5 s)
def test_a_stuck_env_in_a_thread_is_one_line(monkeypatch):
    """The bound (1.5 x SHOAL_STEP_TIMEOUT_S + 1 s = 2.5 s) ends the wait long before the step."""
    monkeypatch.setenv("SHOAL_STEP_TIMEOUT_S", "1")
    stalls = []
    env = Stuck(make_vector_env("CartPole-v1", 2, seed=0))
    actor = BatchedActor(random_policy(False), jax.random.PRNGKey(0), VariableClient(Versions(10**9)), num_envs=2)
    loop = EnvironmentLoop(env, actor, overlap="thread", on_stall=stalls.append)
    loop.step()
    loop.step()
    with pytest.raises(RuntimeError, match=r"step\(\) .* has not returned in 2 s"):
        loop.step()
    assert stalls and "has not returned" in stalls[0]  # (the watch saw it too)
    loop.close()


def test_an_env_that_pickles_fresh_is_refused_for_a_process():
    """Box2D's envs pickle as new instances (EzPickle): moved to a worker they would not be the
    env as it stands, so ``process`` refuses them in one line."""
    pytest.importorskip("Box2D")
    env = make_vector_env("LunarLander-v3", 2, seed=0)
    with pytest.raises(ValueError, match=r"^actor overlap 'process': .*LunarLander pickles as a fresh copy"):
        ProcessStepper(env)
    env.close()


def test_the_flag_reaches_the_config(capsys, tmp_path):
    """``--actor-overlap`` sets ``env.actor_overlap`` (``--dry-run`` prints the resolved config);
    a value it does not know is refused by the parser."""
    run_dir = str(tmp_path / "run")
    args = ["train", "--agent", "dqn", "--env", "CartPole-v1", "--run-dir", run_dir, "--dry-run"]
    assert main([*args, "--actor-overlap", "process"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[0])["env"]["actor_overlap"] == "process"
    assert main([*args, "--actor-overlap", "halves"]) == 2
    assert "invalid choice: 'halves'" in capsys.readouterr().err


@pytest.mark.e2e  # (pauses 3 s, past the bound, by design)
@pytest.mark.parametrize("overlap", ["thread", "process"])
def test_a_loop_that_pauses_between_steps_is_no_stall(overlap, monkeypatch):
    """An overlapped loop's next step is in flight between two ``step`` calls; a loop that pauses
    there longer than the bound (a paced actor) is not stuck once the env has returned."""
    monkeypatch.setenv("SHOAL_STEP_TIMEOUT_S", "1")
    stalls = []
    env = make_vector_env("CartPole-v1", 2, seed=0)
    actor = BatchedActor(random_policy(False), jax.random.PRNGKey(0), VariableClient(Versions(10**9)), num_envs=2)
    loop = EnvironmentLoop(env, actor, overlap=overlap, on_stall=stalls.append)
    try:
        for _ in range(3):  # (the worker is up: each step waited for its env)
            loop.step()
        time.sleep(3)  # (the watch looks every 0.25 s: 12 looks at a step sent 3 s ago)
        loop.step()
        assert stalls == []
    finally:
        loop.close()
