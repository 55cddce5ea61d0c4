"""``launch(program, launcher)``: start every node of a program and supervise it.

Launchers: ``"processes"`` (one OS process per node, this machine), ``"inprocess"`` (one thread
per node, for debugging) and ``"ray"`` (one Ray actor per node, on a Ray cluster or a local Ray
instance). All return a ``ProgramRun`` with the same supervision policy.
"""

from __future__ import annotations

import os
import secrets
import tempfile
from collections.abc import Callable, Mapping

from shoal.core.environment_variables import parse_ports
from shoal.core.files import make_dirs
from shoal.core.shared_memory import sweep_segments
from shoal.launch.programs.addressing import FileAddressBook
from shoal.launch.programs.local import ProcessWorker, ThreadWorker
from shoal.launch.programs.program import Node, Program
from shoal.launch.programs.states import Worker
from shoal.launch.programs.supervision import ProgramRun

LAUNCHERS = ("processes", "inprocess", "ray")


def launch(
    program: Program,
    launcher: str = "processes",
    *,
    run_dir: str | None = None,
    token: str | None = None,
    host: str | None = None,
    group_env: Mapping[str, Mapping[str, str]] | None = None,
    max_restarts: int = 3,
    grace_s: float = 5.0,
    ray_address: str | None = None,
    ports: tuple[int, int] | None = None,
    before_stop: Callable[[ProgramRun], None] | None = None,
) -> ProgramRun:
    """Starts every node of ``program``.

    Args:
      launcher: ``"processes"``, ``"inprocess"`` (``group_env`` cannot apply there) or ``"ray"``.
      run_dir: holds ``logs/`` and ``addresses/`` of a local launch (default: a new
        temp dir). Under Ray, given, its ``logs/`` holds the output of each node that runs where
        that folder is (this machine, or a filesystem the hosts share); the output of the others
        streams to this process.
      token: the shared secret every RPC between nodes must carry. Default: ``SHOAL_TOKEN``
        from the environment, else a new random one for each launch. Nodes get it from the
        launcher (environment, thread context, Ray actor argument), never on a command line.
      host: the interface RPC servers bind; 127.0.0.1 unless you opt in to another. Under Ray,
        by default, nodes on a cluster (``ray_address``) bind every interface and advertise their
        node's IP; on a local Ray this launch starts, loopback.
      group_env: extra environment variables per group, e.g. ``{"actor": {"CUDA_VISIBLE_DEVICES": ""}}``.
      max_restarts: restarts of a crashed node of a restartable group (``Program.group``).
      ray_address: the cluster to join (``auto``, ``HOST:PORT``); ``None`` starts a local Ray.
      ports: ``(first, last)``: the ports the nodes' servers (RPC, replay) listen on, each the
        first free one of the range on its host. Default: any free port on this machine; under
        Ray ``ray_launcher.DEFAULT_PORTS`` (47000-47099), a range a firewall can allow.
      before_stop: ``fn(run)``, called when the program is about to stop (completed, ``stop()``,
        or failed: ``run.failed``) while its nodes that still run are up.
    """
    if launcher not in LAUNCHERS:
        raise ValueError(f"unknown launcher {launcher!r}; choose one of {', '.join(LAUNCHERS)}")
    if not program.nodes:
        raise ValueError(f"program {program.name!r} has no nodes")
    group_env = {group: dict(env) for group, env in (group_env or {}).items()}
    unknown = set(group_env) - set(program.groups)
    if unknown:
        raise ValueError(
            f"group_env names groups {sorted(unknown)} that program {program.name!r} "
            f"does not have (groups: {sorted(program.groups)})"
        )
    check_ports(program, launcher, ports)
    # Every launch is authenticated: any local process could otherwise call a node (and e.g.
    # inflate a run's step counter).
    token = token or os.environ.get("SHOAL_TOKEN") or secrets.token_urlsafe(32)
    if launcher == "ray":
        from shoal.launch.programs.ray.launcher import DEFAULT_PORTS, launch_ray  # lazy: optional extra (ray)

        log_dir = None
        if run_dir is not None:
            log_dir = os.path.join(run_dir, "logs")
            make_dirs(log_dir)
        return launch_ray(
            program,
            token=token,
            group_env=group_env,
            ray_address=ray_address,
            ports=ports or DEFAULT_PORTS,
            log_dir=log_dir,
            host=host,
            max_restarts=max_restarts,
            grace_s=grace_s,
            before_stop=before_stop,
        )
    host = host or "127.0.0.1"
    advertise = "127.0.0.1" if host in ("0.0.0.0", "::") else host  # (all nodes are on this machine)
    run_dir = run_dir or tempfile.mkdtemp(prefix=f"shoal-{program.name}-")
    for sub in ("logs", "addresses"):
        make_dirs(os.path.join(run_dir, sub))
    book = FileAddressBook(os.path.join(run_dir, "addresses"))
    book.clear()  # addresses of an earlier run in this directory
    if launcher == "processes":
        base = dict(
            os.environ,
            SHOAL_TOKEN=token or "",
            SHOAL_BIND_HOST=host,
            SHOAL_ADVERTISE_HOST=advertise,
            PYTHONUNBUFFERED="1",
            SHOAL_PORTS=f"{ports[0]}-{ports[1]}" if ports else "",
        )
        workers: list[ProcessWorker] = []

        def make_worker(node: Node) -> Worker:
            workers.append(ProcessWorker(node, run_dir, {**base, **group_env.get(node.group, {})}))
            return workers[-1]

        def sweep() -> None:  # shared-memory segments its (now dead) nodes could not remove
            sweep_segments(pid for worker in workers for pid in worker.pids)

        close: Callable[[], None] | None = sweep
    else:

        def make_worker(node: Node) -> Worker:
            return ThreadWorker(node, book, token, host, advertise, ports)

        close = None
    return ProgramRun(
        program,
        make_worker,
        launcher=launcher,
        run_dir=run_dir,
        address_book=book,
        token=token,
        on_close=close,
        max_restarts=max_restarts,
        grace_s=grace_s,
        before_stop=before_stop,
    )


def servers(program: Program) -> list[str]:
    """The labels of ``program``'s nodes that serve (each listens on one port)."""
    return [n.label for n in program.nodes if type(n).make_client is not Node.make_client]


def check_ports(program: Program, launcher: str, ports: tuple[int, int] | None) -> None:
    """Raises ``ValueError`` (one line: the range and the ports needed) if ``ports`` cannot
    hold a port for every server ``program`` runs on one host: all of them under the local
    launchers, under Ray the largest set placed together (a node and those colocated with it)."""
    if ports is None:
        return
    try:
        parsed = parse_ports("-".join(map(str, ports)))  # (the range itself, as --ports reads it)
    except (TypeError, ValueError):
        parsed = None
    if parsed is None:
        raise ValueError(f"ports must be (FIRST, LAST) with 1024 <= FIRST <= LAST <= 65535, got {ports!r}")
    first, last = parsed
    labels = servers(program)
    if launcher == "ray":  # (the others may land on other hosts, each with the whole range)
        beside = {label: [label] for label in labels}
        for node in program.nodes:
            anchor = program.placed_beside(node)
            if anchor in beside and node.label in labels:
                beside[anchor].append(node.label)
        labels = max(beside.values(), key=len, default=[])
    if last - first + 1 < len(labels):
        where = "on one host" if launcher == "ray" else "on this machine"
        n = len(labels)
        wider = f"{first}-{first + n - 1}" if first + n - 1 <= 65535 else f"{last - n + 1}-{last}"
        raise ValueError(
            f"the port range {first}-{last} holds {last - first + 1} port(s), but the program's "
            f"{len(labels)} servers {where} ({', '.join(labels)}) need one each: give a range "
            f"of at least {len(labels)} ports (more if actors are added while it runs), e.g. "
            f"--ports {wider}"
        )
