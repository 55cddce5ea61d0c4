"""``defer_import``: an import that costs nothing until the module is used (gymnax's drawing
modules, which its registry imports at the top of every env module, ~1.5 s of a run's start)."""

import importlib.util
import subprocess
import sys

import pytest

from shoal.envs.jax_envs import defer_import


@pytest.fixture
def package(tmp_path, monkeypatch):
    """A package ``deferred_pkg`` with a module and a submodule that count their executions."""
    root = tmp_path / "deferred_pkg"
    root.mkdir()
    (root / "__init__.py").write_text("runs = []\n")
    (root / "drawing.py").write_text("import deferred_pkg\ndeferred_pkg.runs.append('drawing')\nVALUE = 42\n")
    (tmp_path / "deferred_top.py").write_text("RUNS = 1\nVALUE = 'top'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    for name in ("deferred_pkg.drawing", "deferred_pkg", "deferred_top"):
        sys.modules.pop(name, None)


def test_the_module_runs_at_its_first_attribute_read_and_then_is_the_real_one(package):
    defer_import("deferred_pkg.drawing")
    import deferred_pkg
    import deferred_pkg.drawing as drawing  # (an import statement does not run it)

    assert deferred_pkg.runs == []
    assert importlib.util.find_spec("deferred_pkg.drawing").name == "deferred_pkg.drawing"
    assert drawing.VALUE == 42 and deferred_pkg.runs == ["drawing"]
    assert sys.modules["deferred_pkg.drawing"] is deferred_pkg.drawing is not drawing  # (replaced)
    assert drawing.VALUE == 42 and deferred_pkg.runs == ["drawing"]  # (the stand-in forwards: run once)

    defer_import("deferred_top")
    import deferred_top

    assert "RUNS" not in vars(deferred_top)
    assert deferred_top.VALUE == "top" and sys.modules["deferred_top"].RUNS == 1


def test_an_imported_or_missing_module_is_left_alone(package):
    import deferred_top

    defer_import("deferred_top")
    assert sys.modules["deferred_top"] is deferred_top
    defer_import("no_such_module_anywhere")
    defer_import("deferred_pkg.no_such_submodule")
    assert "no_such_module_anywhere" not in sys.modules and "deferred_pkg.no_such_submodule" not in sys.modules


@pytest.mark.e2e  # (a Python process of its own: gymnax's import)
def test_gymnax_imports_without_its_drawing_modules_and_they_still_work():
    pytest.importorskip("gymnax", reason="gymnax is installed --no-deps (docs/anakin.md)")
    code = (
        "import sys\n"
        "from shoal.envs.jax_envs import make_jax_vector_env, _gymnax\n"
        "gymnax = _gymnax(); env, params = gymnax.make('CartPole-v1')\n"
        "assert not {'pandas', 'scipy.stats'} & set(sys.modules), sorted(set(sys.modules) & {'pandas', 'scipy.stats'})\n"
        "import seaborn, matplotlib.pyplot as plt\n"
        "assert len(seaborn.color_palette()) > 0 and callable(plt.figure)\n"
        "print('ok')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-2000:]
