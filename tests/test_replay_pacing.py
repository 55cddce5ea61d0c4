"""DQN's replay ratio in a one-process run, counted (no timing): both backends let the learner
sample the same items at the same inserts, Reverb's ``SampleToInsertRatio`` rule.

The reference is that rule itself, on DQN's CartPole table (16 envs, batches of 64 transitions,
8 SGD steps an update: 32 items a batch, 32 items sampled per item inserted, sampling from 63
items on, an error buffer of ~6 batches): after each insert, as many whole batches as
``inserts * samples_per_insert - samples - 32 >= min_diff`` allows. Each backend's table,
written through DQN's own n-step adder, must let exactly those batches be sampled (``can_sample``
and the contract's ``sample``); and the native one-process path (a gated server, the runner's
``LearningActor``, DQN's real learner on its real dataset) must consume exactly them.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from shoal.agents.dqn.builder import DQNBuilder
from shoal.agents.dqn.config import DQNConfig
from shoal.agents.transition_replay import TABLE
from shoal.core.interfaces import Actor
from shoal.core.specs import make_environment_spec
from shoal.core.types import Step
from shoal.envs import make_vector_env
from shoal.launch.experiments.learner_pacing import LearningActor
from shoal.replay import make_replay_server, reverb_installed, transition_items_per_batch, without_insert_blocking

BACKENDS = ["native"] + (["reverb"] if reverb_installed() else [])
NUM_ENVS = 16
VECTOR_STEPS = 100  # (98 items: from below min_size to 35 past it)


@pytest.fixture(scope="module")
def spec():
    env = make_vector_env("CartPole-v1", NUM_ENVS, seed=0)
    try:
        return make_environment_spec(env)
    finally:
        env.close()


def step(rng: np.random.Generator, observation: np.ndarray) -> Step:
    """A vector step of made-up CartPole data (what replay holds does not matter here)."""
    next_observation = rng.normal(size=(NUM_ENVS, 4)).astype(np.float32)
    return Step(
        observation,
        rng.integers(2, size=NUM_ENVS),
        np.ones(NUM_ENVS, np.float32),
        rng.random(NUM_ENVS) < 0.05,
        np.zeros(NUM_ENVS, bool),
        next_observation,
        {},
    )


def reference(limit, items_per_update: int, num_items: int) -> list[int]:
    """Items sampled after each of ``num_items`` inserts, whole batches taken as soon as Reverb's
    ``CanSample`` allows (no item removed: the table is far from ``max_size``)."""
    sampled, out = 0, []
    for inserts in range(1, num_items + 1):
        while (
            inserts >= limit.min_size_to_sample
            and inserts * limit.samples_per_insert - sampled - items_per_update >= limit.min_diff
        ):
            sampled += items_per_update
        out.append(sampled)
    return out


def dqn_replay(spec, backend: str, gated: bool):
    builder = DQNBuilder(DQNConfig())
    tables = without_insert_blocking(builder.make_replay_tables(spec))  # (as the one-process runner makes them)
    server = make_replay_server(tables, backend, seed=0, gated=gated)
    return builder, tables[0], server


@pytest.mark.parametrize("backend", BACKENDS)
def test_both_tables_let_dqn_sample_its_ratio_from_min_size_on(spec, backend):
    builder, table, server = dqn_replay(spec, backend, gated=False)
    adder = builder.make_adder(server.client, spec)
    c = builder.config
    items_per_update = transition_items_per_batch(c.batch_size, NUM_ENVS) * c.sgd_steps_per_update  # 4 x 8
    rng, observation = np.random.default_rng(0), np.zeros((NUM_ENVS, 4), np.float32)
    sampled, counts = 0, []
    try:
        for _ in range(VECTOR_STEPS):
            s = step(rng, observation)
            adder.add(s)
            adder.flush()  # (confirmed: what the table counts is what was written)
            observation = s.next_observation
            while server.can_sample(TABLE, items_per_update):
                assert len(list(server.client.sample(TABLE, items_per_update))) == items_per_update
                sampled += items_per_update
            counts.append(sampled)
        size = int(server.client.server_info()[TABLE].current_size)
        assert server.items_sampled(TABLE) == sampled
    finally:
        adder.close()
        server.stop()
    assert size == VECTOR_STEPS - 2  # (the 3-step adder's first item comes with its third step)
    expected = reference(table.rate_limit, items_per_update, size)
    assert counts[2:] == expected
    first = next(i for i, c in enumerate(expected) if c)
    assert first + 1 == table.rate_limit.min_size_to_sample == 63  # (1,000 transitions of 16 envs)
    # past the start, one update (32 items, 512 transitions) per item (16 transitions): ratio 32
    assert (expected[-1] - expected[first]) / (size - first - 1) == pytest.approx(32.0)


class _Idle(Actor):
    """An actor with nothing to act on: the test writes its steps through the adder itself."""

    def select_action(self, observation):
        raise AssertionError("not called")

    def observe(self, step):
        raise AssertionError("not called")

    def update(self, wait: bool = False) -> None:
        pass


def test_the_native_one_process_runner_trains_dqn_on_exactly_the_batches_reverb_allows(spec):
    """The runner's gate grants a batch whenever the table could serve one, and DQN's learner
    takes it before the actor's next step: the learner's items, insert by insert, are the
    reference's (the same sequence the first test checks Reverb's table against)."""
    import jax

    builder, table, server = dqn_replay(spec, "native", gated=True)
    dataset = builder.make_dataset_iterator(server.client, spec)
    networks = builder.make_networks(spec)
    learner = builder.make_learner(jax.random.PRNGKey(0), networks, dataset, None, None, server.client)
    adder = builder.make_adder(server.client, spec)
    pacing = LearningActor(_Idle(), learner, server, dataset.table, dataset.items_per_update, pull_after=False)
    rng, observation = np.random.default_rng(0), np.zeros((NUM_ENVS, 4), np.float32)
    consumed = []
    try:
        for _ in range(VECTOR_STEPS):
            s = step(rng, observation)
            adder.add(s)
            observation = s.next_observation
            pacing.update()
            consumed.append(pacing._items_consumed)
            assert server.items_sampled(TABLE) == pacing._items_consumed  # (nothing sampled ahead)
        size = int(server.client.server_info()[TABLE].current_size)
    finally:
        adder.close()
        learner.close()
        server.stop()
    assert dataset.items_per_update == 32
    assert consumed[2:] == reference(table.rate_limit, dataset.items_per_update, size)


@pytest.mark.e2e  # (one DQN run to solve, ~5-10 s: seed 0 on native solves at 4k env steps)
@pytest.mark.timeout(300)
def test_the_replay_solve_benchmark_records_each_run_and_resumes(tmp_path):
    out = tmp_path / "solve.json"
    args = [sys.executable, "benchmarks/replay_solve.py", "--backends", "native", "--seeds", "0", "--out", str(out)]
    for _ in range(2):  # (the second finds the run recorded and runs nothing)
        proc = subprocess.run(args, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
    runs = (tmp_path / "solve.jsonl").read_text().splitlines()
    assert len(runs) == 1
    native = json.loads(out.read_text())["backends"]["native"]
    assert native["runs"] == native["solved"] == 1
    assert native["achieved_samples_per_insert"]["median"] == pytest.approx(32, rel=0.1)
