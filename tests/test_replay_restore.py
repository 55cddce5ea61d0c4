"""A replay server restored from a checkpoint answers the single-process pacing's questions
(``can_sample``, ``items_sampled``) from the tables Reverb restored, not from the empty tables it
was given (Reverb serves new ones after a restore), and so a resumed one-process run paces its
learner as a run that never stopped and is reproducible."""

import json
import shutil

import numpy as np
import pytest

reverb = pytest.importorskip("reverb")

from shoal.agents import get_builder  # noqa: E402
from shoal.launch import ExperimentConfig, run_experiment  # noqa: E402
from shoal.replay import ReverbServer  # noqa: E402
from shoal.replay.tables import RateLimit, TableSpec  # noqa: E402


def ratio_table():
    """Two samples per insert; sampling allowed while inserts*2 - samples - n >= 2*2 - 6 = -2."""
    return TableSpec(
        "t", sampler="uniform", remover="fifo", max_size=100, rate_limit=RateLimit.sample_to_insert_ratio(2.0, 2, 6.0)
    )


def play(server, inserts, samples):
    client = reverb.Client(server.address)
    for _ in range(inserts):
        client.insert([np.zeros(3, np.float32)], {"t": 1.0})
    for _ in range(samples):
        next(iter(client.sample("t", 1)))


def test_a_restored_table_can_sample_as_one_that_never_stopped(tmp_path):
    kept = ReverbServer([ratio_table()])  # the same history, never checkpointed
    first = ReverbServer([ratio_table()], checkpoint_dir=str(tmp_path))
    assert first.restored_from is None
    for server in (kept, first):
        play(server, inserts=4, samples=5)  # 4*2 - 5 = 3: n <= 5 may be sampled
    first.client.checkpoint()
    first.stop()
    restored = ReverbServer([ratio_table()], checkpoint_dir=str(tmp_path))
    assert restored.restored_from is not None
    answers = [restored.can_sample("t", n) for n in range(1, 9)]
    assert answers == [kept.can_sample("t", n) for n in range(1, 9)] == [True] * 5 + [False] * 3
    assert restored.items_sampled("t") == 0  # (counted from this server's start)
    for server in (kept, restored):
        play(server, inserts=2, samples=1)  # 3 + 4 - 1 = 6: n <= 8
    assert [restored.can_sample("t", n) for n in range(1, 11)] == [kept.can_sample("t", n) for n in range(1, 11)]
    assert restored.can_sample("t", 8) and not restored.can_sample("t", 9)
    assert restored.items_sampled("t") == 1 and kept.items_sampled("t") == 6
    for server in (kept, restored):
        server.stop()


@pytest.mark.e2e
def test_a_resumed_one_process_run_is_reproducible(tmp_path):
    """Two copies of one checkpointed run, each resumed, train alike: the learner steps when the
    restored table can serve it (not when its sampler happens to be quick) and the actor acts
    with the restored params from its first step."""
    config = ExperimentConfig.from_flat(
        builder=get_builder("ppo"),
        env_id="CartPole-v1",
        num_envs=4,
        seed=1,
        max_env_steps=1_024,
        eval_every=10**8,
        eval_episodes=1,
        target_return=1e9,
        run_dir=str(tmp_path / "a"),
        progress=False,
    )
    run_experiment(config)
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    digests, evals = [], []
    for name in ("a", "b"):
        result = run_experiment(config.replace(run_dir=str(tmp_path / name), max_env_steps=2_048, resume=True))
        assert result["env_steps"] == 2_048 and result["resumed_from"]["env_steps"] == 1_024
        digests.append(json.loads((tmp_path / name / "checkpoints" / "run.json").read_text())["learner_digest"])
        evals.append((tmp_path / name / "eval.csv").read_text().splitlines())
    assert digests[0] == digests[1]
    assert [row.split(",")[:5] for row in evals[0]] == [row.split(",")[:5] for row in evals[1]]
