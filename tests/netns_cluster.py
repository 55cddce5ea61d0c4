"""Two "hosts" on this machine for multi-host tests: two Linux network namespaces joined by a
veth pair (``10.231.N.1`` and ``10.231.N.2``), a Ray head in the first (with the custom resource
``learner_host``) and a Ray worker (with ``actor_host``) in the second, both with token authentication.

The second host also gets a directory of its own (a tmpfs mounted in its mount namespace over
``private``), so a run directory there is *not* shared storage. Traffic goes only between the
two namespaces; ``teardown`` kills every process in them and deletes them (with the veth pair).
Needs root and ``ip netns``; ``unavailable()`` says why not.
"""

from __future__ import annotations

import dataclasses
import os
import random
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time

RAY = os.path.join(os.path.dirname(sys.executable), "ray")
RAY_PORT = 6379


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=30)


def unavailable() -> str | None:
    """Why two network namespaces cannot be made here, or ``None``."""
    if os.geteuid() != 0:
        return "needs root (ip netns, veth)"
    if shutil.which("ip") is None:
        return "needs iproute2's `ip`"
    name = f"shoal-probe-{secrets.token_hex(3)}"
    made = _ip("netns", "add", name, check=False)
    if made.returncode != 0:
        return f"`ip netns add` failed: {made.stderr.strip()[:200]}"
    _ip("netns", "del", name, check=False)
    return None


@dataclasses.dataclass
class NetnsCluster:
    hosts: tuple[str, str]  # namespace names: head, worker
    ips: tuple[str, str]
    links: tuple[str, str]  # veth ends: in hosts[0], in hosts[1]
    token: str
    private: str  # a directory only the worker host sees as its own (tmpfs)
    groups: list[int] = dataclasses.field(default_factory=list)

    @property
    def address(self) -> str:
        return f"{self.ips[0]}:{RAY_PORT}"

    def env(self, **extra: str) -> dict[str, str]:
        """The environment of a driver in the head's namespace."""
        return {
            **os.environ,
            "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN": self.token,
            "RAY_enable_metrics_collection": "0",
            "RAY_DEDUP_LOGS": "0",
            **extra,
        }

    def popen(self, host: int, argv: list[str], env: dict[str, str] | None = None, **kwargs) -> subprocess.Popen:
        return subprocess.Popen(["ip", "netns", "exec", self.hosts[host], *argv], env=env or self.env(), **kwargs)

    def link(self, up: bool) -> None:
        """Takes the link between the hosts down (or up again), on the head's side."""
        _ip("-n", self.hosts[0], "link", "set", self.links[0], "up" if up else "down")

    def pids(self, host: int) -> list[int]:
        return [int(p) for p in _ip("netns", "pids", self.hosts[host], check=False).stdout.split()]

    def teardown(self) -> None:
        for group in self.groups:
            try:
                os.killpg(group, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for host in range(2):
            for pid in self.pids(host):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        time.sleep(0.5)
        for name in self.hosts:
            _ip("netns", "del", name, check=False)
        shutil.rmtree(self.private, ignore_errors=True)


def start_netns_cluster(temp_dir: str) -> NetnsCluster:
    tag, subnet = secrets.token_hex(3), random.randint(1, 250)
    cluster = NetnsCluster(
        (f"shoal-h1-{tag}", f"shoal-h2-{tag}"),
        (f"10.231.{subnet}.1", f"10.231.{subnet}.2"),
        (f"sh{tag}a", f"sh{tag}b"),
        secrets.token_hex(32),
        tempfile.mkdtemp(prefix="shoal-private-"),
    )
    try:
        for name in cluster.hosts:
            _ip("netns", "add", name)
            _ip("-n", name, "link", "set", "lo", "up")
        _ip(
            "link",
            "add",
            cluster.links[0],
            "netns",
            cluster.hosts[0],
            "type",
            "veth",
            "peer",
            "name",
            cluster.links[1],
            "netns",
            cluster.hosts[1],
        )
        for host in range(2):
            _ip("-n", cluster.hosts[host], "addr", "add", f"{cluster.ips[host]}/24", "dev", cluster.links[host])
            _ip("-n", cluster.hosts[host], "link", "set", cluster.links[host], "up")
        common = ["--num-cpus=2", "--object-store-memory=100000000", "--disable-usage-stats", f"--temp-dir={temp_dir}"]
        head = [
            RAY,
            "start",
            "--head",
            f"--port={RAY_PORT}",
            f"--node-ip-address={cluster.ips[0]}",
            '--resources={"learner_host": 1}',
            "--include-dashboard=false",
            *common,
        ]
        # The worker host mounts a tmpfs over `private` in its own mount namespace (`ip netns
        # exec` gives each command one): what the head writes there, it does not see.
        worker = [
            "sh",
            "-c",
            'mount -t tmpfs shoal-private "$0" && exec "$@"',
            cluster.private,
            RAY,
            "start",
            f"--address={cluster.address}",
            f"--node-ip-address={cluster.ips[1]}",
            '--resources={"actor_host": 4}',
            *common,
        ]
        for host, argv in ((0, head), (1, worker)):
            proc = cluster.popen(
                host, argv, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
            cluster.groups.append(proc.pid)
            out, _ = proc.communicate(timeout=120)
            assert proc.returncode == 0, out[-2000:]
        probe = (
            "import ray, time\nray.init(address='auto', logging_level='error')\n"
            "deadline = time.time() + 60\n"
            "while len([n for n in ray.nodes() if n['Alive']]) < 2 and time.time() < deadline:\n"
            "    time.sleep(0.5)\nprint(len([n for n in ray.nodes() if n['Alive']]))\n"
        )
        proc = cluster.popen(
            0,
            [sys.executable, "-c", probe],
            env=cluster.env(RAY_ADDRESS=cluster.address),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        out, err = proc.communicate(timeout=120)
        assert out.strip().endswith("2"), f"the 2-host Ray cluster did not come up: {out[-500:]} {err[-1500:]}"
        return cluster
    except BaseException:
        cluster.teardown()
        raise
