"""The program graph model, and nodes run by the in-process launcher."""

import collections

import numpy as np
import pytest

from shoal.launch import FunctionNode, Program, ReplayNode, ServiceNode, launch
from shoal.launch.programs.program import Handle, dereference

Pair = collections.namedtuple("Pair", "left right")


class Store:
    def __init__(self, value):
        self.value = value

    def get(self):
        return self.value


def gather(stores, extra):
    """Reads through clients that arrived nested in a list, a dict and a namedtuple."""
    return {
        "list": [s.get() for s in stores],
        "dict": {k: s.get() for k, s in extra["by_name"].items()},
        "pair": [extra["pair"].left.get(), extra["pair"].right.get()],
        "plain": extra["plain"],
    }


def test_graph_groups_labels_and_edges():
    program = Program("p")
    a = program.add_node(ServiceNode(Store, 1), label="a")
    with program.group("worker"):
        w0 = program.add_node(ServiceNode(Store, a))
        w1 = program.add_node(ServiceNode(Store, [a, {"x": w0}]))
    assert [n.label for n in program.nodes] == ["a", "worker_0", "worker_1"]
    assert set(program.groups) == {"a", "worker"}
    assert program.edges() == [("worker_0", "a"), ("worker_1", "a"), ("worker_1", "worker_0")]
    assert "worker_1" in program.describe() and "<- a, worker_0" in program.describe()
    with pytest.raises(ValueError, match="already has a node labelled 'a'"):
        program.add_node(ServiceNode(Store, 2), label="a")
    other = Program("other").add_node(ServiceNode(Store, 3), label="b")
    with pytest.raises(ValueError, match="takes a handle to 'b', which was not added"):
        program.add_node(ServiceNode(Store, other))
    assert isinstance(w1, Handle)


def test_dereference_reaches_nested_handles():
    h = Handle(ServiceNode(Store, 1))
    value = {"l": [h, (h, 2)], "p": Pair(h, 3), "d": {"k": h}}
    out = dereference(value, lambda handle: "client")
    assert out == {"l": ["client", ("client", 2)], "p": Pair("client", 3), "d": {"k": "client"}}


def test_nested_handles_become_clients_inside_nodes():
    program = Program("nested")
    stores = [program.add_node(ServiceNode(Store, i), label=f"s{i}") for i in range(3)]
    extra = {
        "by_name": {"first": stores[0], "last": stores[2]},
        "pair": Pair(stores[1], stores[2]),
        "plain": np.arange(3),
    }
    program.add_node(FunctionNode(gather, stores, extra), label="gather")
    result = launch(program, "inprocess").wait(timeout_s=60)["gather"]
    assert result["list"] == [0, 1, 2] and result["dict"] == {"first": 0, "last": 2}
    assert result["pair"] == [1, 2] and list(result["plain"]) == [0, 1, 2]


def fill_and_checkpoint(replay):
    writer = replay.writer(1)  # (the backend's writer, as the adders use it)
    for i in range(5):
        writer.append([np.full(2, i, np.float32)])
        writer.create_item("t", 1.0, 1)
        writer.commit()
    writer.flush()
    writer.close()
    replay.checkpoint()
    return replay.server_info()["t"].current_size


def read_size(replay):
    return replay.server_info()["t"].current_size


def make_tables():
    from shoal.core.specs import ArraySpec
    from shoal.replay import RateLimit, TableSpec

    return [
        TableSpec(
            "t",
            sampler="uniform",
            remover="fifo",
            max_size=100,
            rate_limit=RateLimit(1.0, 1, -1e300, 1e300),
            signature={"x": ArraySpec((2,), np.float32)},
        )
    ]


def test_replay_node_restores_its_checkpoint(tmp_path):
    first = Program("replay")
    replay = first.add_node(ReplayNode(make_tables, checkpoint_dir=str(tmp_path / "ckpt")), label="replay")
    first.add_node(FunctionNode(fill_and_checkpoint, replay), label="fill")
    assert launch(first, "inprocess", run_dir=str(tmp_path / "run1")).wait(60)["fill"] == 5
    second = Program("replay")
    replay = second.add_node(ReplayNode(make_tables, checkpoint_dir=str(tmp_path / "ckpt")), label="replay")
    second.add_node(FunctionNode(read_size, replay), label="read")
    assert launch(second, "inprocess", run_dir=str(tmp_path / "run2")).wait(60)["read"] == 5


def test_launch_rejects_bad_settings():
    program = Program("p")
    program.add_node(ServiceNode(Store, 1), label="a")
    with pytest.raises(ValueError, match="unknown launcher 'slurm'"):
        launch(program, "slurm")
    with pytest.raises(ValueError, match=r"group_env names groups \['actors'\]"):
        launch(program, "processes", group_env={"actors": {"X": "1"}})
    with pytest.raises(ValueError, match="has no nodes"):
        launch(Program("empty"), "inprocess")


def test_binding_every_interface_turns_the_token_on(tmp_path):
    # No token given: the launcher generates one (nodes get it from the launcher, not argv).
    program = Program("open")
    stores = [program.add_node(ServiceNode(Store, i), label=f"s{i}") for i in range(2)]
    program.add_node(
        FunctionNode(gather, stores, {"by_name": {}, "pair": Pair(stores[0], stores[1]), "plain": 0}), label="gather"
    )
    result = launch(program, "inprocess", host="0.0.0.0", run_dir=str(tmp_path)).wait(timeout_s=60)["gather"]
    assert result["list"] == [0, 1]


def test_the_program_layer_imports_no_rl_library():
    import subprocess
    import sys

    code = (
        "import sys, shoal.launch.programs, shoal.launch, shoal.launch.programs.ray.launcher\n"
        "heavy = ('shoal.replay', 'shoal.agents', 'shoal.launch.experiments', 'jax', 'gymnasium', 'reverb',\n"
        "         'tensorflow')\n"
        "print(sorted(m for m in heavy if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_groups_grow_from_their_factory():
    program = Program("elastic")
    hub = program.add_node(ServiceNode(Store, 0), label="hub")
    program.add_group("worker", lambda i: ServiceNode(Store, hub), 2)
    assert [n.label for n in program.groups["worker"]] == ["worker_0", "worker_1"]
    assert program.new_node("worker").label == "worker_2" and ("worker_2", "hub") in program.edges()
    with pytest.raises(ValueError, match="group 'hub' of program 'elastic' cannot grow"):
        program.new_node("hub")


def test_colocation_names_what_it_cannot_place_and_yields_to_resources():
    from shoal.launch.programs import FunctionNode, Program, Resources

    program = Program("p")
    program.add_node(FunctionNode(print), label="learner")
    program.add_node(FunctionNode(print), label="replay")
    program.add_group("actor", lambda i: FunctionNode(print), 2)
    with pytest.raises(ValueError, match="has no node 'trainer' to colocate with"):
        program.colocate(("replay",), with_node="trainer")
    with pytest.raises(ValueError, match="has no group 'buffer'"):
        program.colocate(("buffer",), with_node="learner")
    program.colocate(("replay", "actor"), with_node="learner")
    replay, actor = program.nodes[1], program.nodes[2]
    assert program.placed_beside(replay) == program.placed_beside(actor) == "learner"
    program.set_resources("actor", Resources(custom={"actor_host": 1}))  # its resources place it instead
    assert program.placed_beside(actor) is None and program.placed_beside(replay) == "learner"
