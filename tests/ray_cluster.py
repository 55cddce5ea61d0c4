"""A real 2-node Ray cluster on this machine, started with `ray start` and torn down by the
process groups its daemons run in (never touching another Ray on the machine).

It runs with Ray's token authentication (``RAY_AUTH_MODE=token``; Ray 2.59+ turns it on for
local clusters, 2.61 for all), with one token per test process (``TOKEN``), which ``start_cluster``
puts in this process's environment: the drivers the tests start inherit it. Ray's client keeps the
token it first read for the life of the process (a C++ cache); ``start_cluster`` resets that cache,
or a test that ran a local Ray earlier in the same pytest worker would leave its token there and
every call to this cluster's state API would be refused.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import signal
import subprocess
import sys
import time

import portpicker

RAY = os.path.join(os.path.dirname(sys.executable), "ray")
TOKEN = secrets.token_hex(32)  # one per test process: every cluster it starts, every attempt


@dataclasses.dataclass
class Cluster:
    address: str
    dashboard: str
    actor_host_node: str  # id of the node that has the custom "actor_host" resource
    groups: list[int]
    learner_host_node: str = ""  # id of the head node, which has the custom "learner_host" resource

    def actors(self, state: str | None = "ALIVE") -> list:
        from ray.util.state import list_actors

        filters = [("state", "=", state)] if state else None
        return list_actors(address=self.dashboard, filters=filters, detail=True, limit=1000)

    def actor(self, name: str):
        """The live actor named ``name`` (a node label), or ``None``."""
        return next((a for a in self.actors() if a.name == name), None)

    def shutdown(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for group in self.groups:
                try:
                    os.killpg(group, sig)
                except ProcessLookupError:
                    pass
            time.sleep(2)


def start_cluster(temp_dir: str, attempts: int = 2) -> Cluster:
    """The cluster, started afresh (new ports, a new session directory) if Ray's own start
    failed (``ray start`` exits non-zero, e.g. its dashboard's modules did not come up, or does
    not return, or its two nodes are not both alive in time), which says nothing about Shoal. ``temp_dir`` must be short: Ray's sockets live under it, and a
    Unix socket's path may not pass 107 bytes."""
    for attempt in range(1, attempts + 1):
        try:
            return _start_cluster(os.path.join(temp_dir, str(attempt)))
        except RayStartFailed:
            if attempt == attempts:
                raise
    raise AssertionError("unreachable")


def _forget_cached_token() -> None:
    """Make Ray's client read ``RAY_AUTH_TOKEN`` afresh (it caches the first token it read)."""
    try:
        from ray._raylet import AuthenticationTokenLoader
    except ImportError:  # a Ray before token authentication: nothing cached
        return
    AuthenticationTokenLoader.instance().reset_cache()


class RayStartFailed(AssertionError):
    """``ray start`` exited with an error."""


def _start_cluster(temp_dir: str) -> Cluster:
    port, dashboard_port = portpicker.pick_unused_port(), portpicker.pick_unused_port()
    cluster = Cluster(f"127.0.0.1:{port}", f"http://127.0.0.1:{dashboard_port}", "", [])
    common = ["--num-cpus=2", "--object-store-memory=100000000", "--disable-usage-stats"]
    os.environ.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=TOKEN)
    _forget_cached_token()
    # Ray 2.60's OpenTelemetry metrics thread segfaulted a pooled worker once in CI
    # (TemporalMetricStorage::buildMetrics) and that run's program never started; the tests
    # need no metrics.
    os.environ["RAY_enable_metrics_collection"] = "0"  # noqa: SIM112 -- Ray's own name
    try:
        for args in (
            [
                "--head",
                f"--port={port}",
                f"--temp-dir={temp_dir}",
                "--include-dashboard=true",
                f"--dashboard-port={dashboard_port}",
                '--resources={"learner_host": 1}',
            ],
            [f"--address={cluster.address}", '--resources={"actor_host": 8}'],
        ):
            proc = subprocess.Popen(
                [RAY, "start", *args, *common],
                start_new_session=True,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            cluster.groups.append(proc.pid)  # the daemons stay in this process group
            try:
                out, _ = proc.communicate(timeout=120)
            except subprocess.TimeoutExpired as e:  # (once in a rehearsal, under a load of ~6: the head's
                # start stopped after "Local node IP"; its process group is killed below, and tried again)
                raise RayStartFailed(f"ray start did not return within 120 s: {(e.output or '')[-2000:]}") from None
            if proc.returncode != 0:
                raise RayStartFailed(out[-2000:])
        from ray.util.state import list_nodes

        deadline = time.monotonic() + 180  # (60 s was once too little with the other worker's tests running)
        seen = "nothing yet"
        while time.monotonic() < deadline:
            try:
                nodes = [n for n in list_nodes(address=cluster.dashboard, detail=True) if n.state == "ALIVE"]
                seen = f"alive nodes' resources: {[sorted(n.resources_total or {}) for n in nodes]}"
            except Exception as e:  # noqa: BLE001 -- the dashboard is still starting
                nodes, seen = [], f"list_nodes raised {type(e).__name__}: {str(e)[:500]}"
            hosts = [n.node_id for n in nodes if "actor_host" in (n.resources_total or {})]
            heads = [n.node_id for n in nodes if "learner_host" in (n.resources_total or {})]
            if len(nodes) == 2 and hosts and heads:
                cluster.actor_host_node, cluster.learner_host_node = hosts[0], heads[0]
                return cluster
            time.sleep(0.5)
        # (Ray's own start, not Shoal's: tried afresh once, as a failed ``ray start`` is)
        raise RayStartFailed(f"the 2-node Ray cluster did not come up within 180 s (last seen: {seen})")
    except BaseException:
        cluster.shutdown()
        raise
