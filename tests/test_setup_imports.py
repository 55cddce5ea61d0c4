"""The package's modules import one way: no cycle in shoal's import graph.

The graph is read from the source (``ast``), every ``import`` and ``from ... import`` a module
holds, at its top or inside a function (a function-level import hides a cycle from Python, not
from a reader: the two modules still need each other). Only edges between shoal's own modules
count; ``from package import name`` counts as an edge to ``package.name`` where that is a
module, else to ``package`` (its ``__init__``, which imports what it re-exports).
"""

from __future__ import annotations

import ast
import functools
import os
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]  # the repository root: the package ``shoal``
SKIPPED = {"tests", "benchmarks", "examples", ".venv", "shoal.egg-info", "build", "dist"}


@functools.cache
def _modules() -> dict[str, pathlib.Path]:
    """``{dotted name: path}`` of every module of the package (read once per test session)."""
    found = {}
    for folder, subfolders, files in os.walk(ROOT):
        here = pathlib.Path(folder)
        top = here == ROOT
        # (pruned as walked: a virtualenv in the checkout holds tens of thousands of files)
        subfolders[:] = [d for d in subfolders if not d.startswith(".") and not (top and d in SKIPPED)]
        for file in (f for f in files if f.endswith(".py")):
            parts = (here / file).relative_to(ROOT).parts
            names = ["shoal", *parts[:-1]] + ([] if file == "__init__.py" else [file[:-3]])
            found[".".join(names)] = here / file
    return found


@functools.cache
def _source(path: pathlib.Path) -> tuple[str, ast.Module]:
    """``path``'s text and its parse, read once per test session (the checks below walk every
    module several times)."""
    text = path.read_text()
    return text, ast.parse(text, str(path))


def _imports(name: str, path: pathlib.Path, modules: dict[str, pathlib.Path]) -> set[str]:
    """The shoal modules ``name`` imports, anywhere in its source."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    edges = set()
    for node in ast.walk(_source(path)[1]):
        if isinstance(node, ast.Import):
            edges.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from the package ``level - 1`` up
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{base}.{node.module}" if node.module else base
            else:
                base = node.module or ""
            for alias in node.names:
                edges.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
    resolved = set()
    for target in edges:  # (``import shoal.a.b`` names the module ``shoal.a.b``; keep the longest known)
        while target and target not in modules:
            target = target.rpartition(".")[0]
        if target and target != name:
            resolved.add(target)
    return resolved


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` (as the path that closes it), or ``None``."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start)):
            return found
    return None


# Known cycles still to break, each an edge (none now; an entry is dropped once its cycle is gone).
KNOWN_EDGES: set[tuple[str, str]] = set()


@functools.cache
def _graph() -> dict[str, set[str]]:
    """Every module's (a package's ``__init__`` included) edges to the shoal modules it imports
    (built once per test session: the tests read it and never change it)."""
    modules = _modules()
    return {
        name: {t for t in _imports(name, path, modules) if (name, t) not in KNOWN_EDGES}
        for name, path in modules.items()
    }


def test_the_walker_sees_function_level_imports_and_finds_a_cycle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
    graph = _graph()
    assert "shoal.launch.experiments.runner" in graph["shoal.launch.experiments.resuming"]  # (inside a function)
    assert "shoal.launch.programs.states" in graph["shoal.launch.programs.scaling"]


def test_no_import_cycle_within_shoal() -> None:
    cycle = _cycle(_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_known_edges_are_still_there() -> None:
    """A known edge that is gone is dropped from ``KNOWN_EDGES`` (no allowance outlives its cycle)."""
    modules = _modules()
    for source, target in KNOWN_EDGES:
        assert target in _imports(source, modules[source], modules), f"{source} -> {target} is gone: drop it"


# -- one way: what each package may import (docs/concepts.md, "Layout") ---------------------------

# A package's own modules and these others; ``launch.programs`` knows no RL (``core`` only), and
# ``launch.experiments`` may use everything below it.
MAY_IMPORT = {
    "core": {"core"},
    "envs": {"core", "envs"},
    "actors": {"core", "envs", "actors"},
    "learners": {"core", "learners"},
    "replay": {"core", "replay"},
    "agents": {"core", "envs", "actors", "learners", "replay", "agents"},
    "launch.programs": {"core", "launch.programs"},
    "launch.experiments": {
        "core",
        "envs",
        "actors",
        "learners",
        "replay",
        "agents",
        "launch.programs",
        "launch.experiments",
    },
}
# Back arrows still to remove, each an edge (dropped once gone: test_the_known_back_edges_are_still_there).
KNOWN_BACK_EDGES: set[tuple[str, str]] = set()


def _layer(module: str) -> str | None:
    """``module``'s package in ``MAY_IMPORT`` (``launch.programs``, ``launch.experiments``: the two
    halves of ``launch``), or ``None`` for the top-level modules (``shoal``, ``shoal.__main__``)."""
    parts = module.split(".")[1:]
    if not parts or parts[0].startswith("__"):
        return None
    return ".".join(parts[:2]) if parts[0] == "launch" and len(parts) > 1 else parts[0]


def _back_edges() -> set[tuple[str, str]]:
    edges = set()
    for source, targets in _graph().items():
        layer = _layer(source)
        if layer not in MAY_IMPORT:
            continue
        edges.update((source, t) for t in targets if _layer(t) not in MAY_IMPORT[layer])
    return edges


def test_the_layer_check_sees_a_back_arrow(monkeypatch) -> None:
    assert _layer("shoal.launch.programs.nodes") == "launch.programs" and _layer("shoal.core.specs") == "core"
    assert _layer("shoal") is None and _layer("shoal.__main__") is None
    graph = {"shoal.actors.loops": {"shoal.launch.programs.nodes", "shoal.core.types"}, "shoal.core.types": set()}
    monkeypatch.setitem(globals(), "_graph", lambda: graph)
    assert _back_edges() == {("shoal.actors.loops", "shoal.launch.programs.nodes")}


def test_packages_import_one_way() -> None:
    back = sorted(_back_edges() - KNOWN_BACK_EDGES)
    assert not back, "imports against the packages' one-way order (docs/concepts.md): " + ", ".join(
        f"{s} -> {t}" for s, t in back
    )


def test_the_known_back_edges_are_still_there() -> None:
    gone = KNOWN_BACK_EDGES - _back_edges()
    assert not gone, f"{sorted(gone)} are gone: drop them from KNOWN_BACK_EDGES"


# -- imports at the top: one inside a function says why (``# lazy: <reason>``) ---------------------


def _unexplained(source: str, where: str, tree: ast.Module | None = None) -> list[str]:
    """``where:line module`` of each import inside a function body of ``source`` (parsed as
    ``tree`` where given) without a ``# lazy:`` comment on one of its lines."""
    lines = source.splitlines()
    found = []
    for fn in ast.walk(tree or ast.parse(source, where)):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(fn):
            if isinstance(node, (ast.Import, ast.ImportFrom)) and not any(
                "# lazy:" in line or "-- lazy:" in line for line in lines[node.lineno - 1 : node.end_lineno]
            ):
                module = node.module if isinstance(node, ast.ImportFrom) else node.names[0].name
                found.append(f"{where}:{node.lineno} {'.' * getattr(node, 'level', 0)}{module}")
    return found


def _unexplained_function_imports() -> list[str]:
    """Every function-level import of the package (tests, benchmarks and examples aside) that
    does not say why it waits."""
    found = set()
    for path in _modules().values():
        text, tree = _source(path)
        found.update(_unexplained(text, str(path.relative_to(ROOT)), tree))
    return sorted(found)


def test_the_reason_check_sees_an_unexplained_import() -> None:
    source = (
        "import os\n\n\ndef f():\n    import json\n    import ray  # lazy: optional extra (ray)\n"
        "    from . import (  # noqa: F401 -- lazy: a cycle\n        x,\n    )\n"
    )
    assert _unexplained(source, "m.py") == ["m.py:5 json"]


def test_function_level_imports_say_why() -> None:
    """Imports belong at the top of their module. One that must wait inside a function (an optional
    extra, a heavy import off the start path, a cycle) carries ``# lazy: <reason>`` on its line."""
    found = _unexplained_function_imports()
    assert not found, (
        f"{len(found)} import(s) inside a function without a reason: {', '.join(found)}. Move each to the "
        "top of its module; if it must stay inside the function (an optional extra such as ray or "
        "matplotlib, a heavy import a plain `shoal train` must not pay, an import cycle), end its line "
        "with `# lazy: <reason in a few words>` (docs/concepts.md, 'Layout')"
    )
