"""Both replay backends keep to ``shoal.replay.contract``, and nothing asks a replay object what
it is: every protocol member exists on each backend's server, client, writer and sampler, with a
signature that takes every call the protocol allows; no ``hasattr`` (or ``getattr`` with a
default) picks behaviour by a replay member's name anywhere in the package; and neither backend
imports the other."""

from __future__ import annotations

import ast
import inspect
import pathlib
import time
import typing

import numpy as np
import pytest

from shoal.core.specs import ArraySpec
from shoal.replay import contract
from shoal.replay.backends import make_replay_server, reverb_installed
from shoal.replay.native.client import NativeReplayClient, NativeWriter
from shoal.replay.native.sampler import NativeSampler
from shoal.replay.native.server import NativeReplayServer
from shoal.replay.reverb.client import ReverbClient, ReverbWriter
from shoal.replay.reverb.sampler import ReverbSampler
from shoal.replay.reverb.server import ReverbServer
from shoal.replay.tables import RateLimit, TableSpec

ROOT = pathlib.Path(__file__).resolve().parents[1]  # the repository root: the package ``shoal``
PACKAGE = ("core", "replay", "actors", "learners", "agents", "launch")

IMPLEMENTATIONS = {  # protocol -> each backend's class
    contract.ReplayServer: (NativeReplayServer, ReverbServer),
    contract.ReplayClient: (NativeReplayClient, ReverbClient),
    contract.ReplayWriter: (NativeWriter, ReverbWriter),
    contract.ReplaySampler: (NativeSampler, ReverbSampler),
}
BACKENDS = ["native"] + (["reverb"] if reverb_installed() else [])


def _members(protocol: type) -> dict[str, object]:
    """The protocol's own members: methods and properties by name, attributes as annotations."""
    members: dict[str, object] = {}
    for klass in reversed(protocol.__mro__):
        if klass in (typing.Protocol, typing.Generic, object):
            continue
        members.update({name: ... for name in getattr(klass, "__annotations__", {})})
        members.update(
            {
                name: value
                for name, value in vars(klass).items()
                if not name.startswith("_") and (callable(value) or isinstance(value, property))
            }
        )
    return members


def _accepts(implementation: inspect.Signature, declared: inspect.Signature) -> str | None:
    """Why ``implementation`` does not take every call ``declared`` allows, else ``None``: each
    declared parameter is taken (by position where the protocol's is positional-only, else by
    name, with a default where the protocol has one), and every other parameter has a default."""
    impl = [p for p in implementation.parameters.values() if p.name != "self"]
    decl = [p for p in declared.parameters.values() if p.name != "self"]
    by_name = {p.name: p for p in impl}
    var_kw = any(p.kind is p.VAR_KEYWORD for p in impl)
    used: set[str] = set()
    for i, want in enumerate(decl):
        if want.kind is want.POSITIONAL_ONLY:
            if i >= len(impl) or impl[i].kind not in (want.POSITIONAL_ONLY, want.POSITIONAL_OR_KEYWORD):
                return f"no positional parameter {i} ({want.name})"
            have = impl[i]
        elif want.name in by_name:
            have = by_name[want.name]
        elif var_kw and want.kind is want.KEYWORD_ONLY:
            continue
        else:
            return f"no parameter {want.name!r}"
        if want.kind is want.POSITIONAL_OR_KEYWORD and have.kind is have.KEYWORD_ONLY:
            return f"{want.name!r} is keyword-only"
        if want.default is not want.empty and have.default is have.empty:
            return f"{want.name!r} has no default"
        used.add(have.name)
    extra = [
        p.name
        for p in impl
        if p.name not in used and p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    return f"parameters {extra} without defaults" if extra else None


@pytest.mark.parametrize("protocol", list(IMPLEMENTATIONS), ids=lambda p: p.__name__)
def test_each_backend_class_has_every_member_of_the_contract_with_a_compatible_signature(protocol):
    members = _members(protocol)
    assert members, protocol
    for implementation in IMPLEMENTATIONS[protocol]:
        for name, declared in members.items():
            have = inspect.getattr_static(implementation, name, None)
            if declared is ... or isinstance(declared, property):
                # (an attribute: a class attribute, a property, or set by __init__ -- read its source)
                assert have is not None or f"self.{name}" in inspect.getsource(implementation.__init__), (
                    f"{implementation.__name__} has no {name!r} ({protocol.__name__})"
                )
                continue
            assert callable(have), f"{implementation.__name__}.{name} is not a method ({protocol.__name__})"
            why = _accepts(inspect.signature(have), inspect.signature(declared))
            assert why is None, f"{implementation.__name__}.{name} does not take {protocol.__name__}'s calls: {why}"


def test_the_signature_check_finds_a_mismatch():  # (a check that finds nothing passes anything)
    def declared(self, table: str, num_items: int, /, *, poll_s: float = 0.5) -> None: ...

    assert _accepts(inspect.signature(lambda self, t, n, poll_s=1.0: None), inspect.signature(declared)) is None
    assert "poll_s" in _accepts(inspect.signature(lambda self, t, n: None), inspect.signature(declared))
    assert "without defaults" in _accepts(
        inspect.signature(lambda self, t, n, x, poll_s=1.0: None), inspect.signature(declared)
    )


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_server_its_client_writer_and_sampler_are_the_contract_s_and_round_trip(backend):
    """The objects a run gets: ``make_replay_server``'s server and client (runtime-checkable
    protocols), its writer and sampler; an item written is the item sampled, with its info."""
    table = TableSpec(
        "t",
        sampler="fifo",
        remover="fifo",
        max_size=10,
        rate_limit=RateLimit(1.0, 1, -1e9, 1e9),
        max_times_sampled=1,
        signature={"x": ArraySpec((2,), np.float32)},
    )  # (sampled once)
    server = make_replay_server([table], backend)
    try:
        assert isinstance(server, contract.ReplayServer) and isinstance(server.client, contract.ReplayClient)
        assert server.backend == server.client.backend == backend and server.restored_from is None
        writer = server.client.writer(1, timeout_s=30.0)
        assert writer.shares_steps == (backend == "native")
        writer.append([np.array([1.0, 2.0], np.float32)])
        writer.create_item("t", 1.0, 1)
        writer.commit()
        writer.flush()
        assert server.client.server_info()["t"].current_size == 1 and server.can_sample("t", 1)
        # (a short poll: closing a stream that prefetches past the one item waits that long)
        sampler = server.client.sampler("t", 1, timeout_s=30.0, poll_s=0.25, each_item_once=True)
        deadline, items = time.monotonic() + 30.0, None
        while items is None and time.monotonic() < deadline:  # (a stream that waited poll_s ends: again)
            items = sampler.sample(1)
        assert isinstance(items, contract.SampledItems) and isinstance(items.info, contract.SampleInfo)
        np.testing.assert_array_equal(items.data["x"], [[1.0, 2.0]])
        assert items.info.times_sampled.tolist() == [1] and server.items_sampled("t") == 1
        example = sampler.example(3)
        assert example.data["x"].shape == (3, 2) and example.info.key.shape == (3,)
        sampler.close()
        assert writer.close() is True
    finally:
        server.stop()


# -- no dispatch on what a replay object is; the backends apart -----------------------------------


def _contract_names() -> set[str]:
    """Every member name of the contract's protocols, and the backends' own public methods (what
    a ``hasattr`` on a replay object would ask about)."""
    names = {name for protocol in IMPLEMENTATIONS for name in _members(protocol)}
    for classes in IMPLEMENTATIONS.values():
        for klass in classes:
            names.update(n for n in vars(klass) if not n.startswith("_"))
    names.update({"futures", "in_process"})  # (a native client's service: the server, or an RPC client of it)
    return names - {"close", "stop", "sample"} | {"sample_batch"}  # (too common to mean replay alone)


def _package_files() -> list[pathlib.Path]:
    return sorted(path for folder in PACKAGE for path in (ROOT / folder).rglob("*.py"))


def _dispatches(tree: ast.AST, names: set[str]) -> list[tuple[int, str]]:
    """``hasattr(x, "name")`` and ``getattr(x, "name", default)`` calls asking about ``names``."""
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
            continue
        asks = (node.func.id == "hasattr" and len(node.args) == 2) or (
            node.func.id == "getattr" and len(node.args) == 3
        )
        if asks and isinstance(node.args[1], ast.Constant) and node.args[1].value in names:
            found.append((node.lineno, f"{node.func.id}(..., {node.args[1].value!r}...)"))
    return found


def test_no_hasattr_dispatch_on_replay_objects_in_the_package():
    names = _contract_names()
    assert {"writer", "sampler", "shares_steps", "send_pending", "sample_batch", "can_sample"} <= names
    found = [
        f"{path.relative_to(ROOT)}:{line}: {call}"
        for path in _package_files()
        for line, call in _dispatches(ast.parse(path.read_text(), str(path)), names)
    ]
    assert not found, "ask the contract, not the object: " + "; ".join(found)
    # the walker sees one
    assert _dispatches(ast.parse("if hasattr(client, 'writer'): pass\ngetattr(w, 'shares_steps', False)"), names) == [
        (1, "hasattr(..., 'writer'...)"),
        (2, "getattr(..., 'shares_steps'...)"),
    ]


def test_replay_itself_holds_no_hasattr():
    found = [
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for path in sorted((ROOT / "replay").rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "hasattr"
    ]
    assert not found, found


def _imported(path: pathlib.Path) -> set[str]:
    modules = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            modules.add(node.module if not node.level else f"(relative) {node.module}")
    return modules


@pytest.mark.parametrize("backend, other", [("native", "reverb"), ("reverb", "native")])
def test_a_backend_imports_nothing_of_the_other(backend, other):
    files = sorted((ROOT / "replay" / backend).rglob("*.py"))
    assert len(files) >= 4, files
    crossing = {
        f"{path.name}: {module}"
        for path in files
        for module in _imported(path)
        if module.startswith(f"shoal.replay.{other}") or module.startswith("(relative)")
    }
    assert not crossing, crossing


def test_outside_the_backends_only_backends_py_names_them():
    """Adders, datasets, runners and launchers talk to replay through the contract; a backend is
    named (imported) only by ``shoal.replay.backends`` and the package's lazy name table."""
    allowed = {ROOT / "replay" / "backends.py", ROOT / "replay" / "__init__.py"}
    found = {
        f"{path.relative_to(ROOT)}: {module}"
        for path in _package_files()
        if path not in allowed
        and not path.is_relative_to(ROOT / "replay" / "native")
        and not path.is_relative_to(ROOT / "replay" / "reverb")
        for module in _imported(path)
        if module.startswith(("shoal.replay.native", "shoal.replay.reverb"))
    }
    assert not found, found
