"""What ``pyproject.toml`` declares: the Python 3.12+ stack capped to the tested range, the
constraints files (``constraints/``, the exact tested sets) inside those ranges, and matplotlib
in the ``plots`` extra only: a training run never imports it, and what draws figures without it
says in one line how to install it."""

import csv
import json
import os
import re
import subprocess
import sys
import tomllib

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# (what Shoal imports of the JAX stack, each capped below the next release CI has not run)
CAPPED_ON_312 = {"jax", "jaxlib", "flax", "optax", "numpy", "orbax-checkpoint", "ml-dtypes"}


def project() -> dict:
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["project"]


def requirements(python: str, extra: str = "") -> list[Requirement]:
    """The requirements that apply on ``python`` ("3.12"): the hard ones, or ``extra``'s."""
    listed = project()["optional-dependencies"][extra] if extra else project()["dependencies"]
    environment = {"python_version": python, "python_full_version": python + ".0", "extra": extra}
    return [r for r in map(Requirement, listed) if r.marker is None or r.marker.evaluate(environment)]


def constraints(name: str) -> dict[str, str]:
    """``constraints/<name>``'s pins: {canonical name: version}; every line a comment or ``name==version``."""
    pins = {}
    with open(os.path.join(ROOT, "constraints", name)) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;]+)", line)
            assert match, f"constraints/{name}: {line!r} is not name==version"
            pins[canonicalize_name(match[1])] = match[2]
    return pins


def test_the_312_stack_is_declared_and_capped():
    found = {canonicalize_name(r.name): r for r in requirements("3.12")}
    missing = CAPPED_ON_312 - set(found)
    assert not missing, f"pyproject.toml does not declare {sorted(missing)} for Python 3.12+"
    uncapped = sorted(
        name for name in CAPPED_ON_312 if not any(s.operator in ("<", "<=", "==", "~=") for s in found[name].specifier)
    )
    assert not uncapped, f"uncapped on Python 3.12+: {uncapped}"
    gpu = [r for r in requirements("3.12", "gpu") if r.name == "jax"]
    assert gpu and all(any(s.operator == "<" for s in r.specifier) for r in gpu), gpu


@pytest.mark.parametrize("name, python", [("py312.txt", "3.12"), ("py311.txt", "3.11")])
def test_the_constraints_file_is_inside_every_declared_range(name, python):
    """``pip install -e '.[dev]' -c constraints/<name>`` can resolve: each pin of a package that
    pyproject names (hard dependency or any extra) satisfies its range there; shoal itself is
    not pinned (an editable install cannot be)."""
    pins = constraints(name)
    assert "shoal" not in pins and len(pins) > 50, sorted(pins)[:10]
    assert CAPPED_ON_312 - {"jaxlib"} <= set(pins), sorted(CAPPED_ON_312 - set(pins))
    outside = []
    for extra in ["", *project()["optional-dependencies"]]:
        for r in requirements(python, extra):
            pinned = pins.get(canonicalize_name(r.name))
            if r.name != "shoal" and pinned is not None and not r.specifier.contains(pinned, prereleases=True):
                outside.append(f"{r.name}=={pinned} (pyproject: {r})")
    assert not outside, f"constraints/{name} pins outside pyproject.toml's ranges: {outside}"


def test_matplotlib_is_in_the_plots_extra_only():
    assert not [r for r in project()["dependencies"] if canonicalize_name(Requirement(r).name) == "matplotlib"]
    assert [Requirement(r).name for r in project()["optional-dependencies"]["plots"]] == ["matplotlib"]
    dev = [Requirement(r) for r in project()["optional-dependencies"]["dev"]]
    assert any(r.name == "shoal" and "plots" in r.extras for r in dev), "the dev extra leaves out plots"


def test_compare_without_matplotlib_says_how_to_install_it_and_writes_nothing(tmp_path, monkeypatch, capsys):
    from shoal.launch.experiments.cli.main import main

    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"agent": "dqn", "env_id": "CartPole-v1", "seed": 0}))
    with open(run / "eval.csv", "w", newline="") as f:
        csv.writer(f).writerows([["env_steps", "wall_s", "eval_return"], [1000, 1.0, 20.0]])
    for module in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, module)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # (`import matplotlib` raises ImportError)
    assert main(["compare", str(run), "--out", str(tmp_path / "out"), "--bootstrap-samples", "10"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "matplotlib" in err[0] and "pip install 'shoal[plots]'" in err[0], err
    assert not (tmp_path / "out").exists() or not os.listdir(tmp_path / "out")  # (nothing half-written)


@pytest.mark.e2e
def test_a_training_run_imports_no_matplotlib(tmp_path):
    """A one-process ``shoal train`` (DQN on CartPole, past its first update, an evaluation and
    a checkpoint) in a fresh interpreter: matplotlib is not among its modules afterwards."""
    script = (
        "import json, sys\n"
        "from shoal.launch.experiments.cli.main import main\n"
        f"code = main(['train', '--agent', 'dqn', '--env', 'CartPole-v1', '--seed', '0', '--max-env-steps', '1100',"
        f" '--run-dir', {str(tmp_path / 'run')!r}])\n"
        "print(json.dumps({'code': code, 'matplotlib': sorted(m for m in sys.modules"
        " if m.split('.')[0] == 'matplotlib')}))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"code": 0, "matplotlib": []}, (result, done.stderr[-3000:])
