"""The package that installs is the package that is tested: ``pyproject.toml`` lists every
folder of the tree that is a Python package (a wheel built from it holds them all; ``.ci/run``
installs that wheel, not an editable tree, and trains from it)."""

import os
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOT_SHIPPED = {"tests", "benchmarks", "examples", "docs", "build", "dist"}  # (folders beside the package)


def tree_packages() -> set[str]:
    """``shoal`` and ``shoal.<dotted folder>`` for every folder under the root with an
    ``__init__.py`` whose parents are packages too."""
    found = {"shoal"}
    for folder, subfolders, files in os.walk(ROOT):
        relative = os.path.relpath(folder, ROOT)
        if relative == ".":
            subfolders[:] = [d for d in subfolders if d not in NOT_SHIPPED and not d.startswith(".")]
            continue
        subfolders[:] = [d for d in subfolders if d != "__pycache__"]
        if "__init__.py" in files:
            found.add("shoal." + relative.replace(os.sep, "."))
        else:
            subfolders[:] = []  # (a folder that is no package holds none the wheel ships)
    return found


def test_pyproject_lists_every_package_of_the_tree():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        listed = set(tomllib.load(f)["tool"]["setuptools"]["packages"])
    tree = tree_packages()
    assert not tree - listed, f"pyproject.toml's [tool.setuptools] packages leaves out {sorted(tree - listed)}"
    assert not listed - tree, f"pyproject.toml lists packages the tree does not have: {sorted(listed - tree)}"


def test_the_tree_check_finds_the_agents():  # (the walk itself: a check that finds nothing passes anything)
    assert {
        "shoal.agents.dqn",
        "shoal.agents.r2d2",
        "shoal.replay.native",
        "shoal.launch.programs.rpc",
    } <= tree_packages()


def test_no_package_holds_more_than_15_modules():
    # (rooms a newcomer can read from the tree: a folder that grows past this splits into rooms)
    crowded = {}
    for package in tree_packages():
        folder = os.path.join(ROOT, *package.split(".")[1:])
        modules = [f for f in os.listdir(folder) if f.endswith(".py")]
        if len(modules) > 15:
            crowded[package] = len(modules)
    assert not crowded, f"packages with more than 15 modules (__init__.py counted): {crowded}"
    assert len(tree_packages()) > 10  # (the walk found the tree)
