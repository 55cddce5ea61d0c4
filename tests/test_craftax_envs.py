"""Craftax's envs as JAX env sources (``--env craftax:<Id>``, ``shoal.envs.jax_envs``): PPO in the
compiled loop through ``shoal train``, and the one-line refusals.

Craftax is the ``craftax`` extra, installed without its dependencies as gymnax is (the README's
test command: ``constraints/without-deps.txt``); without it these skip, and a ``craftax:`` id is
one line naming the install.
"""

from __future__ import annotations

import csv
import json
import sys

import numpy as np
import pytest

from shoal.envs.jax_envs import CRAFTAX_IDS, check_jax_env_id, make_jax_env
from shoal.envs.jax_vector import jax_environment_spec
from shoal.launch.experiments.cli.main import main


def test_without_craftax_a_craftax_id_is_one_line_naming_the_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "craftax", None)  # (import craftax fails, as where it is not installed)
    monkeypatch.setitem(sys.modules, "craftax.craftax_env", None)
    with pytest.raises(ValueError, match=r"craftax envs need the 'craftax' extra.*--no-deps \"craftax==1\.6\.1\""):
        check_jax_env_id("craftax:Craftax-Symbolic-v1")


def test_an_unknown_craftax_id_or_parameter_is_one_line_and_the_spaces_map():
    pytest.importorskip("craftax.craftax_env", reason="the craftax extra")
    with pytest.raises(ValueError, match=r"unknown craftax environment id 'Craftax-Symbolic-v2'; did you mean"):
        check_jax_env_id("craftax:Craftax-Symbolic-v2")
    with pytest.raises(ValueError, match=r"craftax:Craftax-Symbolic-v1 has no parameter gravity; --env-arg sets"):
        make_jax_env("craftax:Craftax-Symbolic-v1", {"gravity": 1})
    env, params = make_jax_env("craftax:Craftax-Classic-Symbolic-v1", {"max_timesteps": 500})
    assert params.max_timesteps == 500
    spec = jax_environment_spec(env, params, 4)
    assert spec.observation.shape == (1345,) and spec.action_space.n == 17  # (Crafter's 17 actions)
    assert len(CRAFTAX_IDS) == 4


@pytest.mark.e2e  # (compiles Craftax's world and PPO in one loop: ~70 s of CPU)
def test_ppo_trains_on_craftax_classic_in_the_compiled_loop(tmp_path, capsys):
    pytest.importorskip("craftax.craftax_env", reason="the craftax extra")
    if sys.version_info < (3, 12):
        pytest.skip("CI time: Python 3.12's run trains it (the same adapter and loop on both stacks)")
    argv = ["train", "--agent", "ppo", "--env", "craftax:Craftax-Classic-Symbolic-v1", "--num-envs", "8"]
    argv += ["--preset", "none"]  # (ppo/craftax's 3 x 512 MLPs: test_unit_agents validates it; CI time)
    argv += ["--max-env-steps", "4096", "--eval-every", "4096", "--eval-episodes", "2"]
    argv += ["--run-dir", str(tmp_path / "run"), "--quiet"]
    assert main(argv) == 0, capsys.readouterr().err[-2000:]
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["launcher"] == "anakin" and result["env_steps"] == 4096 and result["learner_steps"] > 0, result
    with open(tmp_path / "run" / "learner.csv", newline="") as f:
        losses = [float(row["loss"]) for row in csv.DictReader(f)]
    assert losses and np.isfinite(losses).all()
