"""What ``shoal export``, ``shoal evaluate`` and ``shoal status`` refuse, and what they promise
(issue 54): no output into a run directory or through a link, no reading through a link, a
bounded evaluation that reports its progress, and an exported policy that is greedy and loads
with exactly what the docs name."""

import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

from shoal.launch import evaluate_run, export_policy, run_experiment
from shoal.launch.experiments.cli.main import main
from shoal.launch.experiments.config import ExperimentConfig, experiment_config
from shoal.launch.experiments.trained_policy import ENVS_AT_ONCE, MAX_EPISODES, MAX_SEED

DOCS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "trained-policy.md")


@pytest.fixture(scope="module")
def dqn_run(tmp_path_factory):
    """A short DQN run on CartPole whose evaluation policy explores half the time
    (``eval_epsilon=0.5``): its exported policy must still be the greedy one."""
    run_dir = str(tmp_path_factory.mktemp("trust") / "dqn")
    config = experiment_config(
        "dqn",
        "CartPole-v1",
        seed=0,
        max_env_steps=1500,
        eval_every=1500,
        eval_episodes=2,
        run_dir=run_dir,
        target_return=10**6,
        agent_settings={"eval_epsilon": 0.5, "min_replay_size": 200, "samples_per_insert": 2.0},
    )
    run_experiment(config)
    return run_dir


def _one_error_line(capsys) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("shoal: error: "), lines
    return lines[0]


# -- shoal export: never into a run directory, never through a link (item 5) ----------------------


@pytest.mark.e2e
def test_export_refuses_an_out_inside_a_run_directory_and_leaves_the_run_as_it_was(dqn_run, tmp_path, capsys):
    config = os.path.join(dqn_run, "config.json")
    with open(config, "rb") as f:
        before = f.read()
    # (--batch-size: so that before issue 54, JAX 0.4.34 reached the write too)
    assert main(["export", dqn_run, "--out", config, "--batch-size", "4"]) == 2
    assert "inside the run directory" in _one_error_line(capsys)
    os.makedirs(os.path.join(dqn_run, "exports"), exist_ok=True)
    link = tmp_path / "to-run"
    os.symlink(dqn_run, link)  # (the run directory reached through a link to it)
    for out in (os.path.join(dqn_run, "exports", "policy.jax"), str(link / "policy.jax")):
        with pytest.raises(ValueError, match="inside the run directory"):
            export_policy(dqn_run, out, batch_size=4)
    os.rmdir(os.path.join(dqn_run, "exports"))
    with open(config, "rb") as f:
        assert f.read() == before
    assert not [name for name in os.listdir(dqn_run) if name.startswith("policy")]


@pytest.mark.e2e
@pytest.mark.parametrize("which", ["policy.jax", "policy.jax.json"])
def test_export_refuses_a_link_at_out_and_leaves_it_and_its_target_alone(dqn_run, tmp_path, capsys, which):
    target = tmp_path / "precious.txt"
    target.write_text("mine\n")
    os.symlink(target, tmp_path / which)
    assert main(["export", dqn_run, "--out", str(tmp_path / "policy.jax"), "--batch-size", "4"]) == 2
    assert "is a symbolic link" in _one_error_line(capsys)
    assert os.path.islink(tmp_path / which) and target.read_text() == "mine\n"
    assert sorted(os.listdir(tmp_path)) == sorted(["precious.txt", which])  # (nothing half-written)


# -- shoal status: never through a link (item 8) --------------------------------------------------


@pytest.mark.e2e
def test_status_refuses_a_result_json_that_is_a_link_to_an_outside_file(dqn_run, tmp_path, capsys):
    copied = tmp_path / "run"
    shutil.copytree(dqn_run, copied, symlinks=True)
    outside = tmp_path / "outside.json"
    outside.write_text(json.dumps({"solved": True, "env_steps": 123456789, "learner_steps": 1}))
    os.unlink(copied / "result.json")
    os.symlink(outside, copied / "result.json")
    assert main(["status", str(copied)]) == 2
    captured = capsys.readouterr()  # (read once: both streams checked)
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("shoal: error: "), lines
    assert "result.json is a symbolic link" in lines[0] and "--run-dir" not in lines[0], lines  # (status has none)
    assert "123,456,789" not in captured.out + captured.err


def _vanishing_walk(monkeypatch) -> list[str]:
    """``os.walk`` as a live run meets it: every ``*.tmp`` file and ``old-*`` directory it lists
    is removed before the caller looks at it (``write_atomic``'s renamed temp files, a removed
    old checkpoint). Returns what was removed."""
    walk, gone = os.walk, []

    def vanishing(top, *args, **kwargs):
        for root, dirs, files in walk(top, *args, **kwargs):
            for name in dirs + files:
                if name.endswith(".tmp") or name.startswith("old-"):
                    path = os.path.join(root, name)
                    shutil.rmtree(path) if os.path.isdir(path) else os.unlink(path)
                    gone.append(path)
            yield root, dirs, files

    monkeypatch.setattr(os, "walk", vanishing)
    return gone


def test_an_entry_that_vanishes_while_the_run_directory_is_checked_is_passed(tmp_path, monkeypatch):
    from shoal.core.files import check_run_directory

    run = tmp_path / "run"
    (run / "checkpoints" / "old-100").mkdir(parents=True)
    (run / "checkpoints" / "old-100" / "params.npz").write_text("")
    for where in (run, run / "checkpoints"):
        (where / ".run.json.1a2b.tmp").write_text("{}")
    gone = _vanishing_walk(monkeypatch)
    check_run_directory(str(run))  # (before: FileNotFoundError for the first temp file)
    assert len(gone) == 3, gone
    os.symlink(tmp_path, run / "elsewhere")  # (what is there is still checked: status's line names no --run-dir)
    with pytest.raises(ValueError, match=r"elsewhere is a symbolic link; .* \(remove it\)$"):
        check_run_directory(str(run), flag=None)


@pytest.mark.e2e
def test_status_of_a_run_whose_files_come_and_go_while_it_looks_is_never_an_error(
    dqn_run, tmp_path, monkeypatch, capsys
):
    copied = tmp_path / "run"
    shutil.copytree(dqn_run, copied, symlinks=True)
    (copied / "checkpoints" / ".run.json.1a2b.tmp").write_text("{}")
    gone = _vanishing_walk(monkeypatch)
    assert main(["status", str(copied)]) == 0
    captured = capsys.readouterr()
    assert gone and "error" not in captured.err and captured.out.strip(), captured


# -- shoal evaluate: bounded, progress, one line (items 9, 12) ------------------------------------


def test_evaluate_refuses_too_many_episodes_or_a_bad_seed_in_one_line_before_loading_anything(tmp_path, capsys):
    missing = str(tmp_path / "no-such-run")  # (refused before the run directory is even read)
    assert main(["evaluate", missing, "--episodes", "20000000"]) == 2
    assert _one_error_line(capsys) == (f"shoal: error: --episodes must be in [1, {MAX_EPISODES:,}], got 20000000")
    # (ALE's AtariVectorEnv takes seeds < 2**31 only: every episode's seed + i stays within it)
    for seed, episodes in (("-5", "10"), (str(2**31 - 9), "10"), (str(2**31), "1"), (str(2**32), "10")):
        assert main(["evaluate", missing, "--seed", seed, "--episodes", episodes]) == 2
        assert _one_error_line(capsys) == (
            f"shoal: error: --seed must be in [0, {2**31 - int(episodes)}] for "
            f"{episodes} episodes (episode i is reset with seed + i, at most "
            f"{2**31 - 1}), got {seed}"
        )
    for seed, episodes in ((2**31 - 10, 10), (2**31 - 1, 1)):  # (the bound's edge: accepted, then the run is read)
        with pytest.raises(ValueError, match="is not a Shoal run directory"):
            evaluate_run(missing, episodes=episodes, seed=seed)
    with pytest.raises(ValueError, match=r"--episodes must be in \[1, "):
        evaluate_run(missing, episodes=0)
    assert main(["evaluate", "--help"]) == 0  # (the help states the bounds the code holds)
    usage = " ".join(capsys.readouterr().out.split())
    assert f"{ENVS_AT_ONCE} at a time (default 10, at most {MAX_EPISODES:,})" in usage
    assert "seed + i, at most 2**31 - 1" in usage and MAX_SEED == 2**31 - 1


@pytest.mark.e2e
def test_a_long_evaluation_runs_a_bounded_number_of_envs_at_once_and_reports_its_progress(dqn_run, monkeypatch, capsys):
    made = []
    make_env = ExperimentConfig.make_env

    def counted(self, num_envs, seed, evaluation=False):
        made.append(num_envs)
        return make_env(self, num_envs, seed, evaluation=evaluation)

    monkeypatch.setattr(ExperimentConfig, "make_env", counted)
    result = evaluate_run(
        dqn_run, episodes=7, seed=3, env_args={"max_episode_steps": 20}, envs_at_once=3, progress_every_s=0.0
    )
    assert result["episodes"] == 7 and result["length"]["max"] <= 20 and result["length"]["min"] >= 1
    assert set(result["return"]) == {"mean", "std", "median", "min", "max"}
    assert made[-2:] == [3, 1] and max(made) == 3  # (rounds of 3, 3 and 1 envs, never 7 at once; the 3 made once)
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0] == "shoal evaluate: 7 episodes, 3 at a time", err
    lines = [
        re.fullmatch(r"shoal evaluate: (\d) of 7 episodes done \(([\d,]+) env steps, \d+ s\)", line) for line in err[1:]
    ]  # (progress_every_s=0: a line at every vector step)
    assert all(lines), err
    done, steps = [int(m[1]) for m in lines], [int(m[2].replace(",", "")) for m in lines]
    assert sorted(set(done)) == [0, 3, 6] and done == sorted(done) and steps == sorted(steps), err


# -- shoal export: greedy, and loaded with exactly what the docs name (item 14) -------------------


@pytest.mark.e2e
def test_a_dqn_runs_export_takes_any_batch_size_and_is_greedy_with_no_random_draw(dqn_run, tmp_path):
    """The documented command works as written (no ``--batch-size``, on JAX 0.4.34 too), and the
    function is the greedy one: the argmax of the Q values, whatever the run's ``eval_epsilon``."""
    from jax import export

    from shoal import load_policy

    out = str(tmp_path / "policy.jax")
    assert main(["export", dqn_run, "--out", out]) == 0
    with open(out, "rb") as f:
        act = export.deserialize(bytearray(f.read()))
    assert "threefry" not in act.mlir_module() and "rng_bit_generator" not in act.mlir_module()
    policy = load_policy(dqn_run)
    q_network = policy.config.make_networks(policy.spec).q_network
    space_rng = np.random.default_rng(0)
    observations = space_rng.uniform(-0.5, 0.5, (64, 4)).astype(np.float32)
    greedy = np.argmax(np.asarray(q_network.apply(policy.params, observations)), axis=-1)
    assert (np.asarray(act.call(observations)) == greedy).all()
    assert (np.asarray(act.call(observations[:5])) == greedy[:5]).all()  # (any batch size)
    with open(out + ".json") as f:
        assert json.load(f)["policy"] == "greedy"


def _docs_block(language: str, containing: str) -> str:
    """The first fenced ``language`` block of the trained-policy page holding ``containing``."""
    with open(DOCS) as f:
        blocks = re.findall(rf"```{language}\n(.*?)```", f.read(), re.S)
    found = [block for block in blocks if containing in block]
    assert found, f"docs/trained-policy.md has no {language} block with {containing!r}"
    return found[0]


def _requirements(names: list[str]) -> set[str]:
    """``names`` and every distribution they require (not their extras), as pip would install
    them for this Python: the closure of their metadata's ``Requires-Dist``."""
    from importlib import metadata

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    seen: set[str] = set()
    todo = [canonicalize_name(name) for name in names]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for text in metadata.requires(name) or []:
            requirement = Requirement(text)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(canonicalize_name(requirement.name))
    return seen


def _site_of(distributions: set[str], directory: str) -> None:
    """``directory`` made a site-packages holding only ``distributions`` (links to their
    installed top-level files and folders, as their ``RECORD`` lists them)."""
    from importlib import metadata

    for name in distributions:
        dist = metadata.distribution(name)
        tops = {str(path).split("/")[0] for path in dist.files or [] if not str(path).startswith("..")}
        assert tops, f"{name}: no installed files listed"
        for top in tops:
            source = str(dist.locate_file(top))
            if os.path.exists(source) and not os.path.exists(os.path.join(directory, top)):
                os.symlink(source, os.path.join(directory, top))


@pytest.mark.e2e
def test_the_documented_loader_runs_an_export_with_only_what_the_docs_name(dqn_run, tmp_path):
    """The docs' loader, verbatim, in a Python that holds only what the docs' ``pip install``
    line names and what those require (pip's closure of their ``Requires-Dist``, for this
    Python). A fresh venv with ``pip install`` would be the literal check, but takes minutes and
    a package index; this builds the same site-packages from the installed distributions
    instead: a folder of links to the files each one's ``RECORD`` lists, the only entry of
    ``sys.path`` besides the standard library in a ``python -I -S`` (no site-packages, no
    ``PYTHONPATH``, no current directory). What the docs leave out (``flatbuffers`` before issue
    54) is then missing, as it would be for a user."""
    install = _docs_block("bash", "pip install")
    named = [
        word.split("=")[0].split(">")[0].split("<")[0].strip("\"'")
        for word in install.split("pip install", 1)[1].split("#")[0].split()
    ]
    assert "jax" in named and "shoal" not in named, named
    site = tmp_path / "site"
    site.mkdir()
    wanted = _requirements(named)
    _site_of(wanted, str(site))
    assert not {"shoal", "tensorflow", "gymnasium", "dm-reverb"} & wanted, wanted
    loader = _docs_block("python", "export.deserialize")
    out = tmp_path / "policy.jax"
    assert main(["export", dqn_run, "--out", str(out)]) == 0
    program = (
        f"import sys\nsys.path.insert(0, {str(site)!r})\n"
        + loader
        + "\nprint(sorted({m.split('.')[0] for m in sys.modules} & {'shoal', 'tensorflow', 'gymnasium'}))"
        + "\nprint(np.asarray(actions).tolist())\n"
    )
    ran = subprocess.run(
        [sys.executable, "-I", "-S", "-c", program], capture_output=True, text=True, timeout=300, cwd=str(tmp_path)
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    modules, actions = ran.stdout.strip().splitlines()[-2:]
    assert modules == "[]"
    from shoal import load_policy

    policy = load_policy(dqn_run)
    q = policy.config.make_networks(policy.spec).q_network.apply(policy.params, np.zeros((8, 4), np.float32))
    assert json.loads(actions) == np.argmax(np.asarray(q), axis=-1).tolist()


def test_the_export_makes_an_exploring_evaluation_greedy_and_leaves_the_runs_builder_as_it_was():
    from shoal.launch.experiments.exporting import greedy_builder

    for agent, key, exploring in (
        ("ppo", "eval_sample", True),
        ("impala", "eval_sample", True),
        ("dqn", "eval_epsilon", 0.05),
    ):
        builder = experiment_config(agent, "CartPole-v1", agent_settings={key: exploring}).builder
        greedy = greedy_builder(builder)
        assert getattr(greedy.config, key) in (0.0, False) and getattr(builder.config, key) == exploring, agent
        assert type(greedy) is type(builder) and greedy_builder(greedy) is greedy
