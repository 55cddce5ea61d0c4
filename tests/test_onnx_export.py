"""``shoal export --format onnx``: every agent's greedy policy as an ONNX model that onnxruntime
runs in a Python that never imports JAX or Shoal, acting as ``load_policy`` does on 1,000
recorded observations; what it refuses, in one line, with nothing written.

The comparisons need the ``onnx`` extra (Python 3.12+: jax2onnx, onnxruntime, onnx) and skip
without it; the refusals run everywhere."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from shoal.launch.experiments.cli.main import main

STEPS, ROWS = 125, 8  # 1,000 recorded observations: 8 envs side by side, 125 steps

# (agent, env id, env args, agent settings, env steps): MLP discrete and continuous (the
# Gaussian's and SAC's mean), a Dict observation with an image (a CNN torso) and an action mask,
# and both recurrent agents (their state an input and an output)
CASES = {
    "dqn-mlp": ("dqn", "CartPole-v1", {}, {"min_replay_size": 200}, 1000),
    "ppo-gaussian": ("ppo", "Pendulum-v1", {}, {}, 512),
    "sac": ("sac", "Pendulum-v1", {}, {"min_replay_size": 200}, 400),
    "dqn-dict-cnn-mask": (
        "dqn",
        "tests.dict_env:DictCartPole-v0",
        {"masked": True, "max_episode_steps": 50},
        {"min_replay_size": 200},
        400,
    ),
    "ppo-lstm": ("ppo", "shoal/CartPoleNoVelocity-v1", {}, {}, 512),
    "r2d2": ("r2d2", "shoal/CartPoleNoVelocity-v1", {}, {}, 2500),
}

# Runs the model on the recorded observations with onnxruntime alone (its state fed back, reset
# where an episode ended, as the metadata says), and names the modules of JAX or Shoal it loaded.
ONNXRUNTIME_ONLY = """
import json, sys
import numpy as np
import onnxruntime as ort

session = ort.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
meta = session.get_modelmeta().custom_metadata_map
states = json.loads(meta["state"])
data = np.load(sys.argv[2])
steps, rows = data["dones"].shape
state = {s["input"]: np.full([rows, *s["shape"][1:]], s["initial"], s["dtype"]) for s in states}
names = [i.name for i in session.get_inputs() if i.name not in state]
actions = []
for t in range(steps):
    feed = {name: data["obs/" + name][t] for name in names}
    got = session.run([json.loads(meta["action"])["output"]] + [s["output"] for s in states], {**feed, **state})
    actions.append(got[0])
    for s, value in zip(states, got[1:]):
        value[data["dones"][t]] = s["initial"]
        state[s["input"]] = value
np.save(sys.argv[3], np.stack(actions))
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in ("jax", "jaxlib", "shoal", "jax2onnx", "flax"))))
"""


def _train(tmp_path, agent, env_id, env_args, settings, steps, run="run") -> str:
    from shoal.launch import run_experiment
    from shoal.launch.experiments.config import experiment_config

    run_dir = str(tmp_path / run)
    config = experiment_config(
        agent,
        env_id,
        agent_settings=settings,
        seed=0,
        max_env_steps=steps,
        eval_every=10**6,
        eval_episodes=1,
        env_args=env_args,
        run_dir=run_dir,
        target_return=10**6,
        progress=False,
    )
    run_experiment(config)
    return run_dir


def _record(policy) -> dict[str, np.ndarray]:
    """``STEPS`` vector steps of ``ROWS`` envs acted by ``policy``: the observations (by input
    name), its actions and where episodes ended."""
    env = policy.config.make_env(ROWS, 0, evaluation=True)
    observation, _ = env.reset(seed=0)
    policy.reset()
    seen, actions, dones = [], [], []
    for _ in range(STEPS):
        action = policy(observation)
        seen.append(observation if isinstance(observation, dict) else {"observation": observation})
        actions.append(action)
        observation, _, terminated, truncated, _ = env.step(action)
        policy.end_episodes(terminated | truncated)
        dones.append(terminated | truncated)
    env.close()
    data = {f"obs/{key}": np.stack([o[key] for o in seen]) for key in seen[0]}
    return {**data, "actions": np.stack(actions), "dones": np.stack(dones)}


@pytest.mark.e2e
@pytest.mark.parametrize("case", list(CASES))
def test_an_onnx_export_acts_as_load_policy_in_a_python_without_jax_or_shoal(case, tmp_path, capsys):
    pytest.importorskip("jax2onnx", reason="the onnx extra (Python 3.12+)")
    pytest.importorskip("onnxruntime", reason="the onnx extra (Python 3.12+)")
    import onnx

    from shoal import load_policy

    agent, env_id, env_args, settings, steps = CASES[case]
    run_dir = _train(tmp_path, agent, env_id, env_args, settings, steps)
    out = str(tmp_path / "policy.onnx")
    named = {"env_id": env_id} if ":" in env_id else {}  # (code the run directory names, named again)
    assert main(["export", run_dir, "--format", "onnx", "--out", out, *(["--env", env_id] if named else [])]) == 0
    about = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(os.listdir(tmp_path)) == {"run", "policy.onnx"}  # (one file: no sidecar)
    policy = load_policy(run_dir, **named)
    meta = {p.key: json.loads(p.value) for p in onnx.load(out).metadata_props}
    from shoal.launch.experiments.exporting import _described

    assert meta["observation"] == _described(policy.spec.observation) == about["observation"]
    assert meta["action"]["num_actions"] == policy.spec.num_actions and meta["shoal"]["agent"] == agent
    assert bool(meta["state"]) == (policy.policy.initial_state is not None)
    recorded = _record(policy)
    np.savez(tmp_path / "recorded.npz", **recorded)
    (tmp_path / "act.py").write_text(ONNXRUNTIME_ONLY)
    ran = subprocess.run(
        [sys.executable, "act.py", out, "recorded.npz", "actions.npy"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=str(tmp_path),
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert json.loads(ran.stdout.strip().splitlines()[-1]) == []  # (no JAX, no Shoal in that Python)
    actions = np.load(tmp_path / "actions.npy")
    assert actions.shape == recorded["actions"].shape and actions.dtype == recorded["actions"].dtype
    if policy.spec.num_actions is None:  # (continuous: the mean action)
        np.testing.assert_allclose(actions, recorded["actions"], rtol=0, atol=1e-5)
    else:
        assert (actions == recorded["actions"]).all()
        assert len(np.unique(recorded["actions"])) > 1  # (the comparison tells actions apart)


@pytest.mark.e2e
def test_what_jax2onnx_cannot_express_is_one_line_and_nothing_written(tmp_path, capsys):
    pytest.importorskip("jax2onnx", reason="the onnx extra (Python 3.12+)")
    agent = "tests.onnx_agents:CallbackDQN"
    run_dir = _train(tmp_path, agent, "CartPole-v1", {}, {"min_replay_size": 200}, 400)
    capsys.readouterr()
    out = str(tmp_path / "policy.onnx")
    assert main(["export", run_dir, "--out", out, "--agent", agent]) == 2  # (.onnx: the onnx format)
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "cannot express this policy in ONNX" in lines[0] and "pure_callback" in lines[0], lines
    assert sorted(os.listdir(tmp_path)) == ["run"]


def test_a_jax_format_for_an_onnx_file_or_an_unknown_format_is_one_line(tmp_path, capsys):
    from shoal.launch import export_policy

    with pytest.raises(ValueError, match="names an ONNX file but --format is jax"):
        export_policy(str(tmp_path / "no-run"), str(tmp_path / "policy.onnx"), format="jax")
    with pytest.raises(ValueError, match="--format must be one of jax, onnx, got 'tflite'"):
        export_policy(str(tmp_path / "no-run"), str(tmp_path / "policy.tflite"), format="tflite")
    assert os.listdir(tmp_path) == []


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="Python 3.11 only: jax2onnx needs JAX >= 0.8.1")
def test_onnx_on_python_3_11_is_one_line_exit_2_nothing_written(tmp_path, capsys):
    out = str(tmp_path / "policy.onnx")
    assert main(["export", str(tmp_path / "any-run"), "--format", "onnx", "--out", out]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "needs JAX >= 0.8.1 and numpy 2: Python 3.12 or later" in lines[0], lines
    assert os.listdir(tmp_path) == []


@pytest.mark.skipif(sys.version_info < (3, 12), reason="Python 3.12+: where jax2onnx installs")
def test_onnx_without_the_extra_names_the_install_in_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "jax2onnx", None)  # (as if not installed)
    out = str(tmp_path / "policy.onnx")
    assert main(["export", str(tmp_path / "any-run"), "--out", out]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "needs the onnx extra (jax2onnx is missing)" in lines[0], lines
    assert "pip install --no-deps jax2onnx==" in lines[0] and os.listdir(tmp_path) == []


@pytest.mark.e2e
def test_the_deployment_pages_worked_example_runs_as_written(tmp_path):
    """docs/exporting.md's commands (the quickstart's DQN, exported) and its program, verbatim,
    in a Python that imports neither JAX nor Shoal: the ten episodes it plays return 500."""
    pytest.importorskip("jax2onnx", reason="the onnx extra (Python 3.12+)")
    pytest.importorskip("onnxruntime", reason="the onnx extra (Python 3.12+)")
    import re

    from tests.shoal_cli import run_shoal

    with open(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "exporting.md")) as f:
        page = f.read()
    program = next(b for b in re.findall(r"```python\n(.*?)```", page, re.S) if "InferenceSession" in b)
    trained = run_shoal(
        "train",
        "--agent",
        "dqn",
        "--env",
        "CartPole-v1",
        "--seed",
        "0",
        "--run-dir",
        "runs/dqn-cartpole",
        timeout=600,
        cwd=str(tmp_path),
    )
    assert trained.returncode == 0, trained.stderr[-2000:]
    assert json.loads(trained.stdout.strip().splitlines()[-1])["solved"]  # (the quickstart's run: 500)
    exported = run_shoal("export", "runs/dqn-cartpole", "--out", "policy.onnx", timeout=300, cwd=str(tmp_path))
    assert exported.returncode == 0, exported.stderr[-2000:]
    (tmp_path / "play.py").write_text(
        program + "\nimport sys\n\nprint(sorted(m for m in sys.modules if m.split('.')[0] in ('jax', 'shoal')))\n"
    )
    ran = subprocess.run([sys.executable, "play.py"], capture_output=True, text=True, timeout=300, cwd=str(tmp_path))
    assert ran.returncode == 0, ran.stderr[-3000:]
    lines = ran.stdout.strip().splitlines()
    assert lines[-1] == "[]" and float(lines[-2]) == 500.0, lines
