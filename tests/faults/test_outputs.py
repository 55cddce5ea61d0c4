"""What Shoal writes outside a run directory never goes through a link, every JSON it writes is
strict, and a return that is not finite is an error, not a solved run (issue 36, items 3 and 4)."""

import csv
import json
import os
import pathlib
import re

import gymnasium as gym
import numpy as np
import pytest

from shoal.actors import EnvironmentLoop
from shoal.actors.loops import evaluate
from shoal.launch.experiments.run_directory.directory import write_json
from tests.faults import faulty_envs  # noqa: F401 -- (registers the envs)
from tests.faults.harness import shoal_main


def _strict(text):
    """``text`` parsed as strict JSON: ``NaN``, ``Infinity`` and ``-Infinity`` are refused."""

    def refuse(constant):
        raise ValueError(f"not strict JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def _run(root, name="run", returns=(10.0, 50.0)):
    """A run directory as ``shoal compare`` reads it: ``config.json`` and ``eval.csv``."""
    path = root / name
    path.mkdir()
    (path / "config.json").write_text(
        json.dumps(
            {"agent": "dqn", "env_id": "CartPole-v1", "seed": 0, "resolved_target_return": 475.0, "agent_config": {}}
        )
    )
    with open(path / "eval.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["env_steps", "wall_s", "eval_return"])
        writer.writerows((1000 * (i + 1), i + 1.0, r) for i, r in enumerate(returns))
    return path


@pytest.mark.parametrize("name", ["table.md", "summary.json", "CartPole-v1.png", "CartPole-v1.svg"])
def test_compare_refuses_a_link_in_place_of_an_output_and_writes_nothing(tmp_path, name):
    run, out, precious = _run(tmp_path), tmp_path / "out", tmp_path / "precious"
    precious.write_text("precious")
    out.mkdir()
    (out / name).symlink_to(precious)
    rc, errors, text = shoal_main("compare", str(run), "--out", str(out), "--bootstrap-samples", "50")
    assert rc == 2 and errors == [
        f"shoal: error: {out / name} is a symbolic link; Shoal does not write through "
        "links (remove it, or write elsewhere)"
    ], text
    assert precious.read_text() == "precious" and (out / name).is_symlink()
    assert sorted(p.name for p in out.iterdir()) == [name]  # (checked before the first was written)
    (out / name).unlink()
    rc, errors, text = shoal_main("compare", str(run), "--out", str(out), "--bootstrap-samples", "50")
    assert rc == 0 and not errors, text
    assert sorted(p.name for p in out.iterdir()) == ["CartPole-v1.png", "CartPole-v1.svg", "summary.json", "table.md"]
    _strict((out / "summary.json").read_text())


def test_the_output_writer_refuses_links_and_strict_json_names_what_it_cannot_hold(tmp_path):
    from shoal.core.files import json_text, write_output

    precious, out = tmp_path / "precious", tmp_path / "results.json"
    precious.write_text("precious")
    out.symlink_to(precious)
    with pytest.raises(ValueError, match="is a symbolic link"):  # (a benchmark's --out)
        write_output(str(out), json_text({"ok": 1}))
    assert precious.read_text() == "precious" and out.is_symlink()
    out.unlink()
    write_output(str(out), json_text({"ok": 1}))
    assert _strict(out.read_text()) == {"ok": 1}

    with pytest.raises(ValueError, match=r"^the result would hold final\.returns\.1 = inf, which JSON cannot hold"):
        json_text({"final": {"returns": [1.0, float("inf")]}}, "the result")
    result = tmp_path / "result.json"
    with pytest.raises(ValueError, match=rf"^{result} would hold final_eval_return = nan"):
        write_json(str(result), {"final_eval_return": float("nan")})
    assert not result.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["precious", "results.json"]


class _FirstAction:
    """An actor that always takes action 0."""

    def select_action(self, observation):
        return np.zeros(len(observation), np.int64), {}

    def observe(self, step, *args):
        pass

    def update(self, wait=False):
        pass

    def end_episodes(self, ended):
        pass


@pytest.mark.parametrize(
    "env_id, says",
    [
        ("InfiniteRewards-v0", "(envs [0, 1]: rewards [inf, inf], episode returns [inf, inf])"),
        (
            "HugeRewards-v0",
            "(envs [0, 1]: rewards [1e+308, 1e+308], episode returns [1e+308, 1e+308])",
        ),  # (float32: inf)
    ],
)
def test_a_reward_that_is_not_finite_stops_training_and_evaluation(env_id, says):
    env = gym.make_vec(env_id, num_envs=2, vectorization_mode="sync")
    observed = []
    actor = _FirstAction()
    actor.observe = lambda step, *args: observed.append(step)
    loop = EnvironmentLoop(env, actor)
    with pytest.raises(
        RuntimeError,
        match=r"^the environment's rewards are not finite after 0 env steps "
        rf"{re.escape(says)}; a reward must be a finite float32",
    ):
        loop.step()
    assert not observed  # (replay never sees it)
    with pytest.raises(
        RuntimeError,
        match=r"^evaluation: the environment's rewards are not finite after 2 env "
        rf"steps {re.escape(says)}",
    ):
        evaluate(env, _FirstAction(), seed=0)
    env.close()


@pytest.mark.timeout(300)
def test_an_overflowing_reward_is_an_error_not_a_solved_run_and_no_json_holds_infinity(tmp_path):
    run_dir = tmp_path / "run"
    rc, errors, text = shoal_main(
        "train",
        "--agent",
        "dqn",
        "--env",
        "tests.faults.faulty_envs:HugeRewards-v0",
        "--num-envs",
        "4",
        "--eval-every",
        "16",
        "--eval-episodes",
        "2",
        "--max-env-steps",
        "2000",
        "--run-dir",
        str(run_dir),
        "--quiet",
    )
    assert rc == 1 and len(errors) == 1, text
    assert (
        "the environment's rewards are not finite after 0 env steps (envs [0, 1, 2, 3]: rewards [1e+308" in errors[0]
    ), text
    assert "Traceback" not in text
    for root, _, names in os.walk(run_dir):
        for name in names:
            if name.endswith(".json"):
                _strict(pathlib.Path(root, name).read_text())
    assert not (run_dir / "result.json").exists() or not _strict((run_dir / "result.json").read_text())["solved"]
