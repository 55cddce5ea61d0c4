"""Programs as graphs of nodes (after Launchpad): setup -> launch -> execution.

Setup (user code)::

    program = Program("dqn")
    replay = program.add_node(ReplayNode(make_tables), label="replay")
    learner = program.add_node(ServiceNode(make_learner, replay), label="learner")
    with program.group("actor", restartable=True):
        for i in range(4):
            program.add_node(ServiceNode(make_actor, replay, learner, i))

``add_node`` returns the node's ``Handle``. Passing a handle into another node's constructor
(also inside lists, tuples and dicts) is an edge of the graph. At execution time, inside the
node's own thread or process, every handle is *dereferenced* into a client: an ``RpcClient``
for a service node, whatever its ``make_client`` makes for another kind (a ``reverb.Client`` for
the experiments' replay node).

A group may carry ``Resources`` (CPUs, GPUs, memory, custom resources), which the Ray launcher
asks of the cluster for each of its nodes, and may be ``restartable``: a node of it that crashes
is restarted (a bounded number of times) instead of failing the program. The program names its
restartable groups; the launcher knows no group by name. ``program.add_group(name, make_node,
count)`` adds ``count`` nodes ``make_node(i)`` and keeps ``make_node``, so that a running program
can grow or shrink that group (``ProgramRun.add_nodes`` / ``remove_nodes``).
``program.colocate(groups, with_node=label)`` asks that the nodes of ``groups`` run on the
machine of node ``label`` (the Ray launcher honours it for each such group that was given no
``Resources``: a group's resources take it out of the co-location and let the engine place it).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from shoal.launch.programs.resources import Resources


class Handle:
    """A reference to a node, resolved into a client where it is used."""

    def __init__(self, node: Node) -> None:
        self.node = node

    def __repr__(self) -> str:
        return f"Handle({self.node.label!r})"


class Node:
    """Something to run in its own thread or process. Subclasses: see ``shoal.launch.programs.nodes``.

    ``run(ctx)``'s return value is the node's result (JSON values), which the launcher collects
    (``ProgramRun.results``). ``ends_program``: the program completes once every node that has
    it set returned (function nodes have it by default). ``make_client(address, ctx)`` turns
    the address a node published into what a handle to it becomes in another node.
    """

    kind = "node"
    ends_program = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.args, self.kwargs = args, kwargs
        self.label: str = ""
        self.group: str = ""

    def dependencies(self) -> list[Node]:
        return [h.node for h in find_handles((self.args, self.kwargs))]

    def run(self, ctx: Any) -> Any:  # pragma: no cover -- overridden
        raise NotImplementedError

    def make_client(self, address: str, ctx: Any) -> Any:
        raise TypeError(f"node {self.label!r} ({self.kind}) serves nothing; it cannot be a handle target")

    def describe_target(self) -> str:
        return type(self).__name__


def find_handles(value: Any) -> list[Handle]:
    if isinstance(value, Handle):
        return [value]
    if isinstance(value, (list, tuple)):
        return [h for v in value for h in find_handles(v)]
    if isinstance(value, dict):
        return [h for v in value.values() for h in find_handles(v)]
    return []


def dereference(value: Any, resolve) -> Any:
    """``value`` with every ``Handle`` (also nested in lists, tuples, dicts) replaced by ``resolve(h)``."""
    if isinstance(value, Handle):
        return resolve(value)
    if isinstance(value, list):
        return [dereference(v, resolve) for v in value]
    if isinstance(value, tuple):
        return (
            type(value)(*(dereference(v, resolve) for v in value))
            if hasattr(value, "_fields")
            else tuple(dereference(v, resolve) for v in value)
        )
    if isinstance(value, dict):
        return {k: dereference(v, resolve) for k, v in value.items()}
    return value


class Program:
    def __init__(self, name: str) -> None:
        self.name = name
        self.nodes: list[Node] = []
        self.resources: dict[str, Resources] = {}
        self.restartable: set[str] = set()  # groups whose crashed nodes are restarted
        self.node_factories: dict[str, Callable[[int], Node]] = {}
        self.colocated: dict[str, str] = {}  # group -> label of the node its nodes run beside
        self._group: str | None = None

    @contextlib.contextmanager
    def group(self, name: str, resources: Resources | None = None, restartable: bool = False) -> Iterator[None]:
        """Nodes added inside ``with program.group(name):`` belong to group ``name``; with
        ``restartable`` a node of it that crashes is restarted instead of failing the program."""
        if self._group is not None:
            raise ValueError(f"groups do not nest (already in group {self._group!r})")
        if resources is not None:
            self.resources[name] = resources
        if restartable:
            self.restartable.add(name)
        self._group = name
        try:
            yield
        finally:
            self._group = None

    def add_group(
        self,
        name: str,
        make_node: Callable[[int], Node],
        count: int,
        resources: Resources | None = None,
        restartable: bool = False,
    ) -> list[Handle]:
        """Adds nodes ``make_node(0) .. make_node(count - 1)``, labelled ``{name}_{i}``, as group
        ``name``, which a running program can then grow and shrink."""
        if count < 0:
            raise ValueError(f"group {name!r}: count must be >= 0, got {count}")
        self.node_factories[name] = make_node
        with self.group(name, resources, restartable):
            return [self.add_node(make_node(i), label=f"{name}_{i}") for i in range(count)]

    def new_node(self, group: str) -> Node:
        """Adds the next node of a group made with ``add_group`` (labels are never reused: a
        removed node keeps its place in the graph) and returns it."""
        if group not in self.node_factories:
            raise ValueError(
                f"group {group!r} of program {self.name!r} cannot grow: it was not "
                f"added with add_group (growable: {sorted(self.node_factories) or 'none'})"
            )
        index = sum(n.group == group for n in self.nodes)
        with self.group(group):
            return self.add_node(self.node_factories[group](index), label=f"{group}_{index}").node

    def set_resources(self, group: str, resources: Resources) -> None:
        if group not in self.groups:
            raise ValueError(f"program {self.name!r} has no group {group!r} (groups: {sorted(self.groups)})")
        self.resources[group] = resources

    def colocate(self, groups: tuple[str, ...] | list[str], with_node: str) -> None:
        """Places every node of ``groups`` on the machine of node ``with_node`` (e.g. a replay
        server beside its learner, so that sampling never crosses the network)."""
        labels = {n.label: n for n in self.nodes}
        if with_node not in labels:
            raise ValueError(f"program {self.name!r} has no node {with_node!r} to colocate with")
        for group in groups:
            if group not in self.groups:
                raise ValueError(f"program {self.name!r} has no group {group!r} (groups: {sorted(self.groups)})")
            if group == labels[with_node].group:
                raise ValueError(f"group {group!r} cannot be colocated with its own node {with_node!r}")
            self.colocated[group] = with_node

    def placed_beside(self, node: Node) -> str | None:
        """The label of the node ``node`` must run beside, or ``None`` (placed by its resources)."""
        if node.group in self.resources:
            return None
        return self.colocated.get(node.group)

    def add_node(self, node: Node, label: str | None = None) -> Handle:
        group = self._group or label or node.kind
        if label is None:
            label = f"{group}_{sum(n.group == group for n in self.nodes)}"
        if any(n.label == label for n in self.nodes):
            raise ValueError(f"program {self.name!r} already has a node labelled {label!r}")
        if not label.replace("_", "").replace("-", "").isalnum():
            raise ValueError(f"node label {label!r}: use letters, digits, '_' and '-' only")
        node.label, node.group = label, group
        for dep in node.dependencies():
            if dep not in self.nodes:
                raise ValueError(
                    f"node {label!r} takes a handle to {dep.label or dep!r}, "
                    f"which was not added to program {self.name!r}"
                )
        self.nodes.append(node)
        return Handle(node)

    @property
    def groups(self) -> dict[str, list[Node]]:
        out: dict[str, list[Node]] = {}
        for node in self.nodes:
            out.setdefault(node.group, []).append(node)
        return out

    def edges(self) -> list[tuple[str, str]]:
        """``(user, used)`` label pairs: ``user`` was given a handle to ``used``."""
        return [(n.label, d.label) for n in self.nodes for d in dict.fromkeys(n.dependencies())]

    def describe(self) -> str:
        lines = [f"program {self.name!r}: {len(self.nodes)} nodes in {len(self.groups)} groups"]
        for group, nodes in self.groups.items():
            lines.append(f"  group {group} ({len(nodes)}):")
            for node in nodes:
                deps = ", ".join(d.label for d in dict.fromkeys(node.dependencies()))
                lines.append(
                    f"    {node.label:<14} {node.kind:<9} {node.describe_target()}" + (f"  <- {deps}" if deps else "")
                )
        return "\n".join(lines)
