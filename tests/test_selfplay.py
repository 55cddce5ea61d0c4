"""Self-play on two-player turn-based PettingZoo games (``shoal.envs.selfplay``): the learner's
seat as a row, seats alternating, the opponents (random, one-step lookahead, snapshots), the
snapshot pool saved and restored with a resume, win rates in ``eval.csv``, and bad input in one
line before anything starts."""

from __future__ import annotations

import csv
import json
import shutil

import numpy as np
import pytest

pytest.importorskip("pettingzoo.classic")

from shoal.envs import make_vector_env  # noqa: E402
from shoal.envs.selfplay import SnapshotPool  # noqa: E402
from shoal.launch.experiments.config import experiment_config  # noqa: E402
from tests.shoal_cli import run_shoal  # noqa: E402

TICTACTOE = "pettingzoo:pettingzoo.classic.tictactoe_v3"


def play_randomly(opponent: str, copies: int = 40) -> np.ndarray:
    """The returns of one game per copy of tic-tac-toe, the learner's seat played at random."""
    env = make_vector_env(TICTACTOE, copies, seed=0, self_play=True, evaluation=opponent == "lookahead")
    env.opponent = opponent
    obs, _ = env.reset(seed=0)
    rng = np.random.default_rng(1)
    returns, done = np.zeros(copies), np.zeros(copies, bool)
    while not done.all():
        obs, reward, terminated, truncated, _ = env.step(
            np.array([rng.choice(np.flatnonzero(mask)) for mask in obs["action_mask"]])
        )
        returns += reward * ~done
        done |= terminated | truncated
    env.close()
    return returns


def test_the_learner_plays_first_and_second_in_turn_and_the_lookahead_player_beats_a_random_one():
    env = make_vector_env(TICTACTOE, 2, seed=0, self_play=True)
    for _ in range(2):  # (a seeded reset starts the same way: copy 0 first, copy 1 second)
        obs, _ = env.reset(seed=0)
        # copy 0: the learner moves first (an empty board); copy 1: second (the opponent's mark is down)
        assert obs["observation"][0].sum() == 0 and obs["observation"][1][..., 1].sum() == 1
        ended = np.zeros(2, bool)
        while not ended.all():  # (each copy's first game, played from the lowest legal cell)
            obs, reward, terminated, truncated, info = env.step(np.argmax(obs["action_mask"], axis=1))
            for c in np.flatnonzero(terminated & ~ended):  # (its last position, then the next game's)
                final = info["final_obs"][c]
                assert final["observation"].sum() >= 5 and reward[c] in (-1.0, 0.0, 1.0)
                # its second game: seats swapped (copy 0 now second: one mark down; copy 1 first: none)
                assert obs["observation"][c].sum() == (1 if c == 0 else 0)
            ended |= terminated
    env.close()
    against_random, against_lookahead = play_randomly("random"), play_randomly("lookahead")
    assert 0.3 < np.mean(against_random > 0) < 0.8  # (random against random: about even, first seat ahead)
    assert np.mean(against_lookahead > 0) <= 0.15 and np.mean(against_lookahead < 0) >= 0.7


class Counting:
    """A learner's two members a snapshot pool reads: ``version`` and ``get_variables``."""

    def __init__(self) -> None:
        self.version = 0

    def get_variables(self, known_version: int = -1):
        return self.version, {"w": np.full(3, float(self.version)), "b": {"x": np.arange(self.version + 1.0)[:1]}}


def test_the_snapshot_pool_keeps_the_latest_every_so_often_and_restores_what_it_saved(tmp_path):
    source, pool = Counting(), SnapshotPool(size=3, every=10)
    for version in range(0, 45):
        source.version = version
        pool.maybe_add(source)
    assert pool.versions == [20, 30, 40]
    pool.save(str(tmp_path / "pool.npz"))
    restored = SnapshotPool(size=3, every=10)
    restored.restore(str(tmp_path / "pool.npz"), source.get_variables()[1])
    assert restored.versions == [20, 30, 40]
    for (_, got), (_, want) in zip(restored.snapshots, pool.snapshots):
        np.testing.assert_array_equal(got["w"], want["w"])
        np.testing.assert_array_equal(got["b"]["x"], want["b"]["x"])
    rng = np.random.default_rng(0)
    drawn = [pool.sample(rng)[0] for _ in range(400)]
    assert 0.55 < drawn.count(40) / 400 < 0.8 and {20, 30} <= set(drawn)  # (latest: 1/2 + 1/6)


@pytest.mark.e2e
def test_ppo_self_play_logs_win_rates_and_a_resume_restores_its_snapshot_pool(tmp_path):
    """Tic-tac-toe, 20,000 learner moves (a snapshot every 20 updates), then resumed to 40,000:
    the resumed run's pool starts from the saved one (the same versions, the same arrays) and
    grows from there; every evaluation has a win rate against each opponent."""
    run = tmp_path / "run"
    common = ["--max-env-steps", "20000", "--quiet"]
    done = run_shoal(
        "train",
        "--agent",
        "ppo",
        "--env",
        TICTACTOE,
        "--self-play",
        "--eval-every",
        "10000",
        "--eval-episodes",
        "10",
        "--target-return",
        "1e9",
        "--replay",
        "native",
        "--run-dir",
        str(run),
        *common,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    first = json.loads(done.stdout.strip().splitlines()[-1])
    assert first["self_play_pool"] == [0, 20] and first["learner_steps"] > 0
    saved_name = json.loads((run / "checkpoints" / "run.json").read_text())["self_play_pool"]
    shutil.copy(run / "checkpoints" / saved_name, tmp_path / "saved.npz")
    resumed = run_shoal(
        "train", "--resume", str(run), "--env", TICTACTOE, "--max-env-steps", "40000", "--quiet", timeout=300
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    second = json.loads(resumed.stdout.strip().splitlines()[-1])
    assert second["self_play_pool"][:2] == [0, 20] and len(second["self_play_pool"]) > 2
    now_name = json.loads((run / "checkpoints" / "run.json").read_text())["self_play_pool"]
    assert now_name != saved_name and not (run / "checkpoints" / saved_name).exists()  # (one pool: the last)
    with np.load(tmp_path / "saved.npz") as saved, np.load(run / "checkpoints" / now_name) as now:
        kept = [key for key in saved.files if key.startswith(("s0_", "s1_"))]
        assert kept and all(np.array_equal(saved[key], now[key]) for key in kept)
    with open(run / "eval.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 4
    for row in rows:
        rates = [float(row[f"eval_win_rate_{o}"]) for o in ("random", "lookahead", "pool")]
        assert all(0.0 <= r <= 1.0 for r in rates)
    (run / "checkpoints" / now_name).unlink()  # (a checkpoint without its pool: refused before anything starts)
    refused = run_shoal(
        "train", "--resume", str(run), "--env", TICTACTOE, "--max-env-steps", "60000", "--quiet", timeout=300
    )
    assert refused.returncode == 2 and f"names self-play pool '{now_name}', which is not in" in refused.stderr, (
        refused.stderr[-2000:]
    )


@pytest.mark.parametrize(
    "env_id, changes, message",
    [
        ("pettingzoo:mpe2.simple_spread_v3", {}, "--self-play takes a turn-based game"),
        ("CartPole-v1", {}, "--self-play: for a PettingZoo env"),
        (TICTACTOE, {"global_state": True}, "drop --global-state"),
        (TICTACTOE, {"agent_groups": {"*": "x"}}, "drop --agent-group"),
    ],
)
def test_bad_self_play_settings_are_one_line_errors(env_id, changes, message):
    if env_id.startswith("pettingzoo:mpe2"):
        pytest.importorskip("mpe2")
    config = experiment_config("ppo", env_id, preset=None, agent_settings={}, self_play=True, **changes)
    with pytest.raises(ValueError, match=message):
        config.validate_settings()


def test_self_play_refuses_a_recurrent_policy_before_anything_starts():
    config = experiment_config("r2d2", TICTACTOE, preset=None, agent_settings={}, self_play=True)
    with pytest.raises(ValueError, match="--self-play takes a feed-forward policy"):
        config.validate_agent(config.environment_spec(), check_memory=False)


def saved_pool_versions(run) -> list[int]:
    name = json.loads((run / "checkpoints" / "run.json").read_text())["self_play_pool"]
    with np.load(run / "checkpoints" / name) as saved:
        return saved["versions"].tolist()


@pytest.mark.e2e
def test_self_play_over_actor_processes_plays_the_learner_nodes_pool_and_a_resume_restores_it(tmp_path):
    """PPO on tic-tac-toe over two actor processes: the learner node takes the snapshots, and the
    actors and the evaluator play copies of its pool (win rates against it in ``eval.csv``); the
    checkpoint saves the pool, and a resume over processes starts from it."""
    run = tmp_path / "run"
    done = run_shoal(
        "train",
        "--agent",
        "ppo",
        "--env",
        TICTACTOE,
        "--self-play",
        "--launcher",
        "processes",
        "--num-actors",
        "2",
        "--eval-every",
        "10000",
        "--eval-episodes",
        "10",
        "--target-return",
        "1e9",
        "--max-env-steps",
        "20000",
        "--quiet",
        "--run-dir",
        str(run),
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    first = json.loads(done.stdout.strip().splitlines()[-1])
    assert first["launcher"] == "processes" and first["learner_steps"] > 20
    assert first["self_play_pool"][0] == 0 and len(first["self_play_pool"]) >= 2
    saved = saved_pool_versions(run)
    assert saved[0] == 0 and len(saved) >= 2
    with open(run / "eval.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) >= 2 and all(0.0 <= float(row["eval_win_rate_pool"]) <= 1.0 for row in rows)
    assert int(rows[-1]["self_play_snapshots"]) >= 2  # (the evaluator's copy of the pool)
    for actor in ("actor_0", "actor_1"):  # (each actor's copy, as it logged it)
        with open(run / f"{actor}.csv") as f:
            assert max(int(row["self_play_snapshots"]) for row in csv.DictReader(f)) >= 2
    resumed = run_shoal(
        "train", "--resume", str(run), "--env", TICTACTOE, "--max-env-steps", "30000", "--quiet", timeout=300
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    second = json.loads(resumed.stdout.strip().splitlines()[-1])
    assert second["launcher"] == "processes"
    kept = [v for v in saved if v in second["self_play_pool"]]
    assert kept == saved[len(saved) - len(kept) :] and kept  # (the saved pool's latest, still held)
    assert max(second["self_play_pool"]) > max(saved)  # (and snapshots taken after the resume)
