"""The shared-memory value: readers in other processes see whole versions, never torn ones."""

import multiprocessing as mp

import numpy as np
import pytest

from shoal.core.shared_memory import SharedValuePublisher, SharedValueReader, host_id
from tests.shoal_cli import run_shoal


def _reader(location, size, seconds, ready, out):
    """Reads for ``seconds``; reports (distinct versions seen, torn or failed reads, reads)."""
    import time

    reader = SharedValueReader.attach(location)
    ready.put(True)
    seen, bad, reads = set(), [], 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        reads += 1
        try:
            version, value = reader.read(-1, timeout_s=30)
            a, b = value["a"], value["b"]
            if len(a) != size or not (a == version).all() or not (b == -version).all():
                bad.append(f"torn at version {version}")
            seen.add(version)
        except Exception as e:  # noqa: BLE001 - a failed read is what this test looks for
            bad.append(repr(e))
    out.put((len(seen), bad[:5], len(bad), reads))


def _value(version, size):
    return {"a": np.full(size, version, np.float32), "b": np.full(size // 4, -version, np.int64)}


@pytest.mark.e2e  # (reader processes, 3 s each)
@pytest.mark.timeout(300)
@pytest.mark.parametrize("size", [8, 200_000])  # small: many header writes; large: long frame copies
def test_readers_in_other_processes_never_see_a_torn_version(size):
    """Two reader processes read while the writer publishes as fast as it can. The small value
    catches a header caught mid-write (the writer once zeroed the header before filling it: 75
    bad reads in 3 s); the large one, frame copies overtaken by the next version."""
    publisher = SharedValuePublisher("test", 1 << 22)
    try:
        publisher.publish(0, _value(0, size))
        ctx = mp.get_context("spawn")
        ready, out = ctx.Queue(), ctx.Queue()
        readers = [ctx.Process(target=_reader, args=(publisher.location(), size, 3.0, ready, out)) for _ in range(2)]
        for r in readers:
            r.start()
        for _ in readers:
            ready.get(timeout=120)
        version = 0
        while any(r.is_alive() for r in readers) and out.qsize() < len(readers):  # write while they read
            version += 1
            publisher.publish(version, _value(version, size))
        results = [out.get(timeout=60) for _ in readers]
        for r in readers:
            r.join(10)
        assert all(num_bad == 0 for _, _, num_bad, _ in results), results
        assert all(seen > 1 for seen, _, _, _ in results), results  # they saw versions change
    finally:
        publisher.close()


def test_a_closed_segment_and_another_host_are_refused():
    publisher = SharedValuePublisher("test", 1024)
    reader = SharedValueReader.attach(publisher.location())
    assert publisher.publish(3, {"x": 1}) and reader.read(-1) == (3, {"x": 1}) and reader.read(3) == (3, None)
    assert not publisher.publish(4, {"x": np.zeros(4096)})  # larger than the segment: not published
    publisher.close()
    with pytest.raises(ValueError, match="closed"):
        reader.read(3)
    assert SharedValueReader.attach({"path": publisher.path, "host": "elsewhere/" + host_id()}) is None


@pytest.mark.e2e
def test_actors_of_a_local_program_read_parameters_from_shared_memory(tmp_path):
    import json

    run_dir = tmp_path / "run"
    proc = run_shoal(
        "train",
        "--agent",
        "dqn",
        "--env",
        "CartPole-v1",
        "--launcher",
        "processes",
        "--num-actors",
        "1",
        "--num-envs",
        "8",
        "--seed",
        "0",
        "--set",
        "min_replay_size=256",
        "--max-env-steps",
        "3000",
        "--eval-every",
        "3000",
        "--eval-episodes",
        "2",
        "--target-return",
        "1e9",
        "--quiet",
        "--run-dir",
        str(run_dir),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1])["learner_steps"] > 0
    assert "[actor_0] reads parameters from shared memory" in (run_dir / "logs" / "actor_0.log").read_text()
    csv_rows = (run_dir / "actor_0.csv").read_text().splitlines()
    header = csv_rows[0].split(",")
    versions = [int(float(row.split(",")[header.index("params_version")])) for row in csv_rows[1:]]
    assert versions and versions[-1] > 0, versions  # the actor saw the learner's new versions (0: the initial)
