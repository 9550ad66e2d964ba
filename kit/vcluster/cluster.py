"""up / down / status of a virtual cluster kept in one directory (its state, config and logs)."""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from kit.atomic import atomic_write_bytes, atomic_write_text
from kit.errors import KitError
from kit.vcluster import daemons, net
from kit.vcluster.sites import SITE_FILES, check_binds, check_intel_mpi, write_sites
from kit.vcluster.slurmconf import SOCKET_PATH_MAX, hosts_file, longest_socket, slurm_conf
from kit.vcluster.state import NAME_RE, ClusterState, Made, VclusterError, load_state

MAX_NODES = 16
LOCK = ".vcluster.lock"


@dataclass
class Report:
    """What `up` did (or found), and where the user's files are."""

    state: ClusterState
    started: bool  # False: the cluster was already running, nothing was changed
    sites: list[Path]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """One up/down at a time per cluster directory."""
    directory.mkdir(parents=True, exist_ok=True)
    fd = os.open(directory / LOCK, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _check_names(name: str, count: int) -> None:
    if not NAME_RE.fullmatch(name):
        raise VclusterError(
            f"--name {name!r}: it prefixes interface names, which Linux limits to 15 characters",
            fix="give 1-8 lower-case letters and digits, a letter first",
        )
    if not 1 <= count <= MAX_NODES:
        raise VclusterError(
            f"{count} nodes: every node shares this machine's cores",
            fix=f"give 1 to {MAX_NODES}",
        )


def _check_room(directory: Path, name: str, count: int) -> None:
    """Slurm's sockets fit a socket path under DIRECTORY, or `up` is refused before anything is
    made (a job would only stay PENDING, 'launch failed requeued held')."""
    path = longest_socket(directory, [f"{name}-{i}" for i in range(1, count + 1)])
    over = len(os.fsencode(path)) - SOCKET_PATH_MAX
    if over > 0:
        raise VclusterError(
            "the cluster's directory is too long for Slurm: "
            f"its socket {path} would take {SOCKET_PATH_MAX + over} bytes, "
            f"and a socket's path holds {SOCKET_PATH_MAX}",
            fix=f"give a --dir at most {len(os.fsencode(str(directory))) - over} bytes long "
            "(e.g. /tmp/vc)",
            where=str(directory),
        )


def _preflight(directory: Path, name: str, count: int) -> None:
    _check_names(name, count)
    _check_room(directory, name, count)
    if os.geteuid() != 0:
        raise VclusterError(
            "kit vcluster needs root (network and UTS namespaces, a bridge)",
            fix="run it as root on a machine of your own",
        )
    if missing := daemons.missing_tools():
        raise VclusterError(
            f"{', '.join(missing)} not found",
            fix="install Slurm (slurmctld, slurmd, client), "
            "munge and iproute2 (scripts/setup.sh does, as root)",
        )


def preview(
    name: str,
    count: int,
    subnet: str | None = None,
    *,
    intel_mpi: Path | None = None,
    directory: Path,
    binds: tuple[str, ...],
) -> tuple[str, list[dict]]:
    """What `up` would make now (for --dry-run): the subnet and the nodes; nothing is made."""
    _check_names(name, count)
    _check_room(directory.absolute(), name, count)
    check_intel_mpi(intel_mpi)
    check_binds(directory.absolute(), list(binds))
    network = net.check_subnet(subnet) if subnet else net.free_subnet()
    return str(network), plan_nodes(name, count, network)


def plan_nodes(name: str, count: int, subnet) -> list[dict]:
    hosts = list(subnet.hosts())
    return [
        {
            "name": f"{name}-{i}",
            "netns": f"kvc-{name}-{i}",
            "veth": f"kvc-{name}-{i}",
            "address": str(hosts[9 + i]),
        }
        for i in range(1, count + 1)
    ]


def up(
    directory: Path,
    count: int,
    name: str = "vc",
    *,
    subnet: str | None = None,
    intel_mpi: Path | None = None,
    binds: tuple[str, ...] = (),
) -> Report:
    """Start an N-node cluster, or report the one already running here. A half-made one (an `up`
    killed, a daemon dead) is refused: `down` first. An `up` that fails half-way removes what it
    made (and nothing else) before it says why."""
    directory = directory.absolute()
    _preflight(directory, name, count)
    check_intel_mpi(intel_mpi)
    check_binds(directory, list(binds))
    with _locked(directory):
        state = load_state(directory)
        if state is not None:
            return _running(state, count, name)
        try:
            with net.allocation_lock():
                network = net.check_subnet(subnet) if subnet else net.free_subnet()
                hosts = list(network.hosts())
                nodes = plan_nodes(name, count, network)
                bridge = f"kvc-{name}"
                taken = [x for x in [bridge] + [n["veth"] for n in nodes] if net.link_exists(x)] + [
                    n["netns"] for n in nodes if net.netns_exists(n["netns"])
                ]
                if taken:
                    raise VclusterError(
                        f"{', '.join(taken)} already exist(s) on this host and {directory} records "
                        "no cluster that made them",
                        fix="--name OTHER, or kit vcluster down THE_DIR_THAT_MADE_THEM",
                    )
                state = ClusterState(
                    name=name,
                    directory=str(directory),
                    subnet=str(network),
                    nodes=nodes,
                    bridge=bridge,
                    host_address=str(hosts[0]),
                    controller=socket.gethostname().split(".")[0],
                    partition=name,
                )
                _create(state, Made("bridge", bridge), lambda: net.add_bridge(bridge))
                net.configure_bridge(bridge, state.host_address, network.prefixlen)
            # each part recorded before it is made: a kill here leaves it all for `down`
            _make(state)
            sites = write_sites(state, intel_mpi, list(binds))
        except (KitError, OSError) as exc:
            if state is None:
                raise
            raise _undone(state, exc) from None
        state.complete = True
        state.save()
        return Report(state, True, sites)


def _create(state: ClusterState, made: Made, create: Callable[[], object]) -> None:
    """Record MADE, then make it. If making it fails, nothing was made (e.g. another took the name
    after the check): its record goes, so that no undo or `down` removes what someone else made."""
    state.record(made)
    try:
        create()
    except VclusterError:
        state.made.remove(made)
        state.save()
        raise


def _undone(state: ClusterState, exc: KitError | OSError) -> VclusterError:
    """Remove what a failed `up` recorded, and its state file (its config and logs stay): the error
    to raise, saying so, or naming `down` if removing failed too."""
    reason = (
        str(exc)
        if isinstance(exc, KitError)
        else f"{exc.filename or state.directory}: {exc.strerror or exc}"
    )
    try:
        _remove(state)
    except (KitError, OSError) as again:
        return VclusterError(
            f"{reason}; removing what this up made failed too ({again})",
            fix=f"kit vcluster down {state.directory}",
        )
    return VclusterError(f"{reason} (this up removed what it had made)")


def _make(state: ClusterState) -> None:
    d = Path(state.directory)
    prefixlen = int(state.subnet.split("/")[1])
    for node in state.nodes:
        _create(
            state,
            Made("netns", node["netns"]),
            functools.partial(net.ip, "netns", "add", node["netns"]),
        )
        _create(
            state,
            Made("veth", node["veth"]),
            functools.partial(net.add_veth, node["netns"], node["veth"]),
        )
        net.configure_node(
            node["netns"], node["veth"], state.bridge, address=node["address"], prefixlen=prefixlen
        )
    # tmp: slurm.conf's TmpFS
    per_node = [f"{kind}/{n['name']}" for kind in ("spool", "tmp") for n in state.nodes]
    for sub in ("munge", "run", "logs", "slurmctld", *per_node):
        try:
            (d / sub).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise VclusterError(
                f"{d / sub}: {exc.strerror}, "
                f"where the cluster keeps its {sub.split('/')[0]} directory",
                fix="move it away, or use another --dir",
            ) from None
    (d / "munge").chmod(0o755)  # munged wants the socket's directory searchable by every client
    key = d / "munge" / "munge.key"
    if not key.exists():
        atomic_write_bytes(key, os.urandom(1024), perm=0o400)
    atomic_write_text(
        state.conf,
        slurm_conf(
            state.name,
            d,
            controller=state.controller,
            host_address=state.host_address,
            nodes=state.nodes,
            partition=state.partition,
            cpus=os.cpu_count() or 1,
            ctld_port=_free_port(),
            slurmd_port=_free_port(),
        ),
    )
    atomic_write_text(d / "hosts", hosts_file(state.controller, state.host_address, state.nodes))
    daemons.start_munged(state)
    daemons.start_slurmctld(state)
    for node in state.nodes:
        daemons.start_slurmd(state, node)
    daemons.wait_idle(state)


def _running(state: ClusterState, count: int, name: str) -> Report:
    problems = health(state)
    if problems:
        raise VclusterError(
            f"{state.path}: a cluster was made here but is not whole ({'; '.join(problems)})",
            fix=f"kit vcluster down {state.directory}, then up again",
        )
    if (len(state.nodes), state.name) != (count, name):
        raise VclusterError(
            f"{state.directory} runs cluster {state.name} with {len(state.nodes)} nodes",
            fix=f"kit vcluster down {state.directory} first, or use another --dir",
        )
    written = [Path(state.directory) / f for f in SITE_FILES]
    return Report(state, False, [p for p in written if p.is_file()])


def health(state: ClusterState) -> list[str]:
    """What is missing from a recorded cluster; empty when every part runs."""
    if not state.complete:
        return ["its `up` did not finish"]
    problems = [
        f"{m.name} not running"
        for m in state.made
        if m.kind == "daemon" and not daemons.recorded_pid(m)
    ]
    problems += [
        f"namespace {n['netns']} gone" for n in state.nodes if not net.netns_exists(n["netns"])
    ]
    problems += [] if net.link_exists(state.bridge) else [f"bridge {state.bridge} gone"]
    return problems


def status(directory: Path) -> dict:
    """The recorded cluster and Slurm's view of its nodes (JSON-ready)."""
    state = load_state(directory.absolute())
    if state is None:
        return {
            "dir": str(directory.absolute()),
            "running": False,
            "name": None,
            "subnet": None,
            "bridge": None,
            "slurm_conf": None,
            "problems": [],
            "nodes": [],
        }
    problems = health(state)
    slurm = daemons.node_states(state) if not problems else {}
    return {
        "dir": state.directory,
        "running": not problems,
        "name": state.name,
        "subnet": state.subnet,
        "bridge": state.bridge,
        "slurm_conf": str(state.conf),
        "problems": problems,
        "nodes": [
            {
                "name": n["name"],
                "address": n["address"],
                "netns": n["netns"],
                "slurm_state": slurm.get(n["name"]),
            }
            for n in state.nodes
        ],
    }


def down(directory: Path, dry_run: bool = False) -> list[str]:
    """Stop and remove, newest first, exactly what the state records; what is already gone is
    skipped. The directory's config and logs stay (they are the user's to read)."""
    directory = directory.absolute()
    # a dry run only reads (the state is written atomically), and
    if dry_run or not directory.is_dir():
        state = load_state(directory)  # no directory records no cluster: neither makes the lock
        return [f"{made.kind} {made.name}" for made in reversed(state.made)] if state else []
    with _locked(directory):
        state = load_state(directory)
        return _remove(state) if state else []


def _remove(state: ClusterState) -> list[str]:
    """Stop and remove, newest first, what the state records, then the state file."""
    removed = []
    for made in reversed(state.made):
        removed.append(f"{made.kind} {made.name}")
        daemons.stop(made)
        if made.kind == "netns":
            net.delete_netns(made.name)
        elif made.kind in ("veth", "bridge"):
            net.delete_link(made.name)
    for node in state.nodes:
        with contextlib.suppress(FileNotFoundError, NotADirectoryError):
            (Path(state.directory) / "run" / f"slurmd-{node['name']}.pid").unlink()
    state.path.unlink()
    return removed
