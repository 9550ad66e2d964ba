"""Start and stop the cluster's daemons; every wait bounded, every kill aimed at a recorded pid."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from kit.boundedrun import run_bounded
from kit.excerpt import one_line
from kit.vcluster import net
from kit.vcluster.state import ClusterState, Made, VclusterError

TOOLS = ("ip", "nsenter", "unshare", "munged", "slurmctld", "slurmd", "sinfo", "scontrol")
START_TIMEOUT = 30
IDLE_TIMEOUT = 60
# Inside a node: its own mount namespace (the hosts file over /etc/hosts; a /dev/shm of its own, as
# ch-run --join and MPI's shared memory expect one per node), IPC and UTS namespaces (its own
# hostname), then slurmd under the node's Slurm name. Values arrive as arguments, never as code.
NODE_SHELL = (
    'mount --bind "$1" /etc/hosts && mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /dev/shm && '
    'hostname "$2" && exec "$3" -f "$4" -N "$2"'
)


def tool(name: str) -> str:
    found = shutil.which(name) or (
        f"/usr/sbin/{name}" if Path("/usr/sbin", name).exists() else None
    )
    if found is None:
        raise VclusterError(
            f"{name} not found",
            fix="install Slurm, munge and iproute2 (scripts/setup.sh does, as root)",
        )
    return found


def missing_tools() -> list[str]:
    return [t for t in TOOLS if not (shutil.which(t) or Path("/usr/sbin", t).exists())]


def _run(argv: list[str], what: str, env: dict[str, str] | None = None) -> None:
    try:
        done = run_bounded(argv, timeout=START_TIMEOUT, env=env)
    except subprocess.TimeoutExpired:
        raise VclusterError(
            f"{what} did not start in {START_TIMEOUT} s",
            fix="see the logs in the cluster directory",
        ) from None
    if done.returncode:
        raise VclusterError(
            f"{what} did not start: {one_line(done.err or done.out, 300)}",
            fix="see the logs in the cluster directory",
        )


def start_munged(state: ClusterState) -> None:
    d = Path(state.directory) / "munge"
    pid_file = d / "munged.pid"
    state.record(Made("daemon", "munged", str(pid_file), str(d / "munge.socket")))
    _run(
        [
            tool("munged"),
            f"--socket={d / 'munge.socket'}",
            f"--key-file={d / 'munge.key'}",
            f"--pid-file={pid_file}",
            f"--log-file={Path(state.directory) / 'logs' / 'munged.log'}",
            f"--seed-file={d / 'seed'}",
            "--force",
        ],
        "munged",
    )


def start_slurmctld(state: ClusterState) -> None:
    pid_file = Path(state.directory) / "run" / "slurmctld.pid"
    state.record(Made("daemon", "slurmctld", str(pid_file), str(state.conf)))
    _run([tool("slurmctld"), "-c", "-f", str(state.conf)], "slurmctld", state.env)


def start_slurmd(state: ClusterState, node: dict) -> None:
    pid_file = Path(state.directory) / "run" / f"slurmd-{node['name']}.pid"
    state.record(Made("daemon", f"slurmd {node['name']}", str(pid_file), str(state.conf)))
    hosts = Path(state.directory) / "hosts"
    _run(
        [
            tool("nsenter"),
            f"--net=/run/netns/{node['netns']}",
            tool("unshare"),
            "--uts",
            "--ipc",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            NODE_SHELL,
            "sh",
            str(hosts),
            node["name"],
            tool("slurmd"),
            str(state.conf),
        ],
        f"slurmd of {node['name']}",
        state.env,
    )


def node_states(state: ClusterState) -> dict[str, str]:
    """Slurm's view of each node: `idle`, `alloc`, `drain` (with reason), `down*`, or why it cannot
    tell.
    """
    try:
        done = run_bounded([tool("sinfo"), "-h", "-N", "-o", "%N|%t|%E"], timeout=15, env=state.env)
    except subprocess.TimeoutExpired:
        return {n["name"]: "no answer from slurmctld" for n in state.nodes}
    found = {}
    for line in done.out.splitlines() if done.returncode == 0 else []:
        node, slurm_state, reason = (line.split("|") + ["", ""])[:3]
        found[node] = slurm_state + (f" ({reason})" if reason and reason != "none" else "")
    return {n["name"]: found.get(n["name"], "unknown to slurmctld") for n in state.nodes}


def wait_idle(state: ClusterState, timeout: float = IDLE_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while True:
        states = node_states(state)
        if all(s == "idle" for s in states.values()):
            return
        if time.monotonic() > deadline:
            raise VclusterError(
                f"nodes not idle after {timeout:.0f} s: "
                + ", ".join(f"{n} {s}" for n, s in states.items()),
                fix=f"see {Path(state.directory) / 'logs'}",
            )
        time.sleep(0.3)


def recorded_pid(made: Made) -> int | None:
    """The pid in a daemon's pid file, if that process still runs the command recorded for it."""
    if made.pid_file is None:  # not a daemon's record: no process of its own
        return None
    try:
        pid = int(Path(made.pid_file).read_text().strip())
        cmdline = (
            Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        )
    except (OSError, ValueError, TypeError):
        return None
    return pid if made.argv_mark and made.argv_mark in cmdline else None


def terminate(pids: list[int], grace: float = 5.0) -> None:
    """SIGTERM, then SIGKILL what is left after ``grace`` seconds."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(_alive(p) for p in pids):
            time.sleep(0.1)
        pids = [p for p in pids if _alive(p)]
        if not pids:
            return


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def stop(made: Made) -> None:
    if made.kind == "daemon":
        pid = recorded_pid(made)
        if pid:
            terminate([pid])
    elif made.kind == "netns":  # everything inside was started there by the cluster
        terminate(net.netns_pids(made.name))
