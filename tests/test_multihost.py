"""Shoal across two hosts: a Ray head and a Ray worker in two network namespaces joined by a veth
pair (``tests/netns_cluster.py``), actors on the second host reading parameters over RPC.

* a run survives an actor's worker killed with SIGKILL and the link down for a few seconds;
* the link down past the peer timeout ends the run with one line naming the silent node and
  its host, and leaves no node process on either host (the cut-off host's exit by themselves);
* a run directory the second host does not share is refused before anything is written.

Skipped with the reason where namespaces cannot be made (not root, no ``ip netns``).
"""

import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading

import pytest

from tests.netns_cluster import start_netns_cluster, unavailable
from tests.shoal_cli import shoal_command
from tests.waiting import wait_for

# (not imported here: Ray reads its auth token once, and tests/ray_cluster.py sets one later)
WHY = "needs the 'ray' extra" if importlib.util.find_spec("ray") is None else unavailable()
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,  # programs across two network namespaces (~3 min: -m slow)
    pytest.mark.skipif(WHY is not None, reason=f"two network namespaces: {WHY}"),
]

SMALL = [
    "--agent",
    "dqn",
    "--env",
    "CartPole-v1",
    "--num-envs",
    "8",
    "--seed",
    "0",
    "--set",
    "min_replay_size=256",
    "--target-return",
    "1e9",
    "--eval-episodes",
    "2",
    "--quiet",
    "--launcher",
    "ray",
    "--num-actors",
    "2",
    "--resources",
    "actor:actor_host=1",
    "--resources",
    "learner:learner_host=1",
    "--params-via",
    "rpc",
]


@pytest.fixture(scope="module")
def cluster():
    temp_dir = tempfile.mkdtemp(prefix="shoal-ray-", dir="/tmp")  # (short: Ray's socket paths, see test_ray)
    cluster = start_netns_cluster(temp_dir)
    yield cluster
    cluster.teardown()
    assert not cluster.pids(0) and not cluster.pids(1)
    shutil.rmtree(temp_dir, ignore_errors=True)


class Driver:
    """``shoal train`` in the head's namespace, its output read as it comes."""

    def __init__(self, cluster, run_dir, *args, env=None):
        self.proc = cluster.popen(
            0,
            shoal_command("train", *SMALL, "--ray-address", cluster.address, "--run-dir", str(run_dir), *args),
            env=env or cluster.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.out, self.err = [], []
        self._threads = [
            threading.Thread(target=self._read, args=(s, b), daemon=True)
            for s, b in ((self.proc.stdout, self.out), (self.proc.stderr, self.err))
        ]
        for t in self._threads:
            t.start()

    def _read(self, stream, lines):
        for line in stream:
            lines.append(line)

    @property
    def text(self) -> str:
        return "".join(self.out) + "".join(self.err)

    def started(self) -> dict[str, tuple[int, str]]:
        """``{label: (pid, ip)}`` of every node's latest start."""
        found = {}
        for m in re.finditer(r"\[(\w+)\] started \(pid (\d+), node \w+ at ([\d.]+)", self.text):
            found[m.group(1)] = (int(m.group(2)), m.group(3))
        return found

    def wait(self, timeout):
        try:
            code = self.proc.wait(timeout=timeout)
        finally:
            self.proc.kill()
        for t in self._threads:
            t.join(timeout=10)
        return code


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # (a zombie is gone for our purpose)
        return f.read().split(") ")[-1][0] != "Z"


def test_a_run_survives_a_killed_actor_worker_and_a_short_partition(cluster, tmp_path):
    driver = Driver(cluster, tmp_path / "run", "--max-env-steps", "12000", "--eval-every", "12000")
    try:
        nodes = wait_for(
            lambda: (
                (s := driver.started()).keys() >= {"learner", "actor_0", "actor_1", "replay"}
                and "[actor_1] reads parameters over RPC" in driver.text
                and s
            ),
            180,
            "every node to start",
        )
        assert nodes["actor_0"][1] == nodes["actor_1"][1] == cluster.ips[1]  # actors on the second host
        for label in ("learner", "replay", "counter", "evaluator"):  # the services beside the learner
            assert wait_for(lambda: driver.started().get(label), 60, label)[1] == cluster.ips[0]  # noqa: B023
        # Hold the learner (the rate limiter then holds the actors) while actor_0's worker is
        # killed and restarted by Ray and the link is down: the run cannot end before.
        os.kill(nodes["learner"][0], signal.SIGSTOP)
        os.kill(nodes["actor_0"][0], signal.SIGKILL)
        wait_for(lambda: driver.started()["actor_0"][0] != nodes["actor_0"][0], 120, "actor_0's restart")
        cluster.link(up=False)
        far = re.escape(cluster.ips[1])
        wait_for(
            lambda: re.search(rf"actor_\d on {far} has not answered", driver.text),
            60,
            "a warning that the far host's nodes went silent",
        )
        cluster.link(up=True)
        wait_for(
            lambda: re.search(rf"actor_\d on {far} answers again", driver.text),
            60,
            "the far host's nodes to answer again",
        )
        os.kill(nodes["learner"][0], signal.SIGCONT)
        code = driver.wait(timeout=300)
    finally:
        cluster.link(up=True)
        driver.proc.kill()
    assert code == 0, driver.text[-4000:]
    result = json.loads(driver.out[-1])
    assert result["env_steps"] >= 12000 and result["launcher"] == "ray"
    assert re.search(r"\n  actor_0 +actor +(stopped|killed) +1  ", driver.text), driver.text[-2000:]
    port = int(re.search(r"Started replay server on port (\d+)", driver.text).group(1))
    assert 47000 <= port <= 47099  # (the default range under Ray, which a firewall can allow)
    wait_for(lambda: not any(alive(pid) for pid, _ in driver.started().values()), 30, "every node process to end")


def test_a_partition_past_the_peer_timeout_is_one_line_and_leaves_no_process(cluster, tmp_path):
    driver = Driver(
        cluster,
        tmp_path / "run",
        "--max-env-steps",
        str(10**7),
        "--eval-every",
        str(10**7),
        env=cluster.env(SHOAL_PEER_TIMEOUT_S="6"),
    )
    try:
        wait_for(
            lambda: (
                "[actor_1] reads parameters over RPC" in driver.text
                and "[actor_0] reads parameters over RPC" in driver.text
            ),
            180,
            "both actors to run",
        )
        nodes = driver.started()
        cluster.link(up=False)
        code = driver.wait(timeout=120)
        errors = [line for line in driver.err if line.startswith("shoal: error:")]
        assert code == 1 and len(errors) == 1, driver.text[-4000:]
        assert re.search(r"actor_\d failed: no answer from actor_\d on " + re.escape(cluster.ips[1]), errors[0]), errors
        # Both hosts' node processes end: the cut-off host's by themselves, the link still down.
        wait_for(lambda: not any(alive(pid) for pid, _ in nodes.values()), 60, "every node process to end")
        assert not [
            f
            for f in os.listdir("/dev/shm")
            if re.match(rf"shoal-.*-({'|'.join(str(p) for p, _ in nodes.values())})-", f)
        ]
    finally:
        cluster.link(up=True)
        driver.proc.kill()


def test_a_run_directory_the_other_host_does_not_share_is_refused(cluster):
    run_dir = os.path.join(cluster.private, "run")
    driver = Driver(cluster, run_dir, "--max-env-steps", "1000")
    code = driver.wait(timeout=120)
    errors = [line for line in driver.err if line.startswith("shoal: error:")]
    assert code == 2 and len(errors) == 1, driver.text[-3000:]
    assert "not on storage every host" in errors[0] and cluster.ips[1] in errors[0]
    assert not os.path.exists(run_dir) and not os.listdir(cluster.private)
