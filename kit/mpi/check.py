"""`kit mpi check`: prove a pair with 2 real ranks under the site's launcher, on this machine or, on a
Slurm site, on 2 nodes (one rank each: the ranks then talk over the network)."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import uuid
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from kit.errors import KitError
from kit.mpi.imagefs import image_kind
from kit.mpi.launch import FIX_MISSING, launcher_now
from kit.mpi.pair_builder import Pair
from kit.site.model import VENDOR_BANNERS

RANKS = 2
NODES = (1, 2)  # a node count RANKS divides: the same ranks per node
MCA_MARK = "/mca_"  # Open MPI's components are DIR/mca_<framework>_<name>.so


@dataclass
class RankReport:
    rank: int
    size: int
    host: str
    library_version: str
    mapped: list[str]
    sum: int
    libc: list[str] = field(default_factory=list)  # where the C library was mapped from

    @property
    def libraries(self) -> list[str]:
        """The MPI libraries mapped, without Open MPI's components (dozens of mca_*.so: a reader
        wants their directories, component_dirs)."""
        return [m for m in self.mapped if MCA_MARK not in m]

    @property
    def component_dirs(self) -> list[str]:
        return sorted({m.rsplit("/", 1)[0] for m in self.mapped if MCA_MARK in m})


@dataclass
class CheckResult:
    command: list[str]
    nodes: int = 1
    ranks: list[RankReport] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    output: str = ""

    @property
    def ok(self) -> bool:
        return not self.problems and len(self.ranks) == RANKS


def launcher_command(pair: Pair, ranks: int, nodes: int = 1) -> tuple[list[str], list[str]]:
    """(launcher argv, extra ch-run join args) for the site's launcher (kit.mpi.launch's registry),
    ranks spread evenly over nodes."""
    per_node = ranks // nodes
    words, srun = launcher_now(pair.site, ranks, nodes)
    # Not the step id nor the pid alone: both repeat (a pid namespace's pids start afresh), and the
    # segment a killed check leaves would be joined (kit.mpi.launch.JOIN_TAG_LINE). One argv word:
    # every rank gets the same.
    tag = f"--join-tag=kitcheck-{os.getpid()}-{uuid.uuid4().hex}"
    if srun:
        return words, ["--join", tag]
    return [*_allocation(pair, nodes, per_node), *words], [f"--join-ct={per_node}", tag]


def _allocation(pair: Pair, nodes: int, per_node: int) -> list[str]:
    """An MPI's own launcher reaches other nodes only inside a Slurm allocation (it starts its
    daemons there with srun): salloc one for the check, unless it already runs inside a job."""
    site = pair.site
    if nodes == 1 or os.environ.get("SLURM_JOB_ID"):
        return []
    if site.scheduler.type != "slurm" or shutil.which("salloc") is None:
        raise KitError(f"site {site.name}: a {nodes}-node check needs Slurm (scheduler.type: slurm and salloc "
                       "on PATH); fix: run it on the site's login node, or with --nodes 1")
    partition = [f"--partition={site.scheduler.partition}"] if site.scheduler.partition else []
    return ["salloc", "--quiet", f"--nodes={nodes}", f"--ntasks-per-node={per_node}", *partition, "--time=5"]


def run_check(pair: Pair, python: str = "python3", timeout: float = 120.0, nodes: int = 1) -> CheckResult:
    """Launch RANKS ranks of ch-run + mpi4py in the pair's image on `nodes` nodes and judge what they
    report."""
    if nodes not in NODES:
        raise KitError(f"--nodes {nodes}: give one of {', '.join(map(str, NODES))} (the check runs {RANKS} ranks)")
    image = Path(pair.image)
    if image_kind(image) in ("tar", "source"):
        raise KitError(f"{image}: ch-run needs a directory or SquashFS image; convert it first "
                       "(kit image convert IMAGE OUT.sqfs --site SITE)")
    if pair.missing:
        raise KitError(f"{image}: the image lacks what the pair binds onto: {', '.join(pair.missing)}; "
                       f"fix: {FIX_MISSING}")
    if shutil.which("ch-run") is None:
        raise KitError("ch-run not found: install Charliecloud (Debian package charliecloud)")
    launcher, join = launcher_command(pair, RANKS, nodes)
    chrun = pair.ch_run_args(str(image), join=join)
    program = resources.files("kit.mpi").joinpath("rank_report.py").read_text()
    cmd = launcher + chrun + [python, "-c", program]
    env = dict(os.environ)
    env.setdefault("USER", "root")
    env.update(pair.site.host_mpi.launch_env)  # the launcher side sees the site's MPI settings too
    result = CheckResult(command=launcher + chrun + [python, "-c", "<kit/mpi/rank_report.py>"], nodes=nodes)
    try:
        returncode, stdout, stderr = _run_bounded(cmd, env, timeout)
    except subprocess.TimeoutExpired as exc:
        result.problems.append(f"ranks did not finish within {timeout:.0f} s")
        result.output = _text(exc.stdout) + _text(exc.stderr)
        return result
    result.output = stdout + stderr
    for line in stdout.splitlines():
        if line.startswith("KITCHECK "):
            try:
                result.ranks += [RankReport(**r) for r in json.loads(line[len("KITCHECK "):])]
            except (ValueError, TypeError) as exc:
                result.problems.append(f"unreadable rank report ({exc}): {line[:200]}")
    result.ranks.sort(key=lambda r: r.rank)
    _judge(pair, returncode, result)
    return result


def _run_bounded(cmd: list[str], env: dict[str, str], timeout: float) -> tuple[int, str, str]:
    """Run the launcher in a session of its own, so that at the timeout the whole tree goes (a
    salloc then gives its allocation back, an mpirun its daemons), not only the launcher."""
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
        return proc.returncode, stdout, stderr
    except subprocess.TimeoutExpired:
        stdout = stderr = None
        for sig, grace in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
            try:
                os.killpg(proc.pid, sig)
                stdout, stderr = proc.communicate(timeout=grace)
                break
            except ProcessLookupError:
                break
            except subprocess.TimeoutExpired as again:
                stdout, stderr = again.stdout, again.stderr
        raise subprocess.TimeoutExpired(cmd, timeout, output=stdout, stderr=stderr) from None


def _text(data: str | bytes | None) -> str:
    return data.decode(errors="replace") if isinstance(data, bytes) else data or ""


def _judge(pair: Pair, returncode: int, result: CheckResult) -> None:
    if returncode != 0:
        result.problems.append(f"launcher exited with status {returncode}")
    if len(result.ranks) != RANKS:
        result.problems.append(f"{len(result.ranks)} of {RANKS} ranks reported")
    hosts = sorted({r.host for r in result.ranks})
    if result.ranks and len(hosts) != result.nodes:
        result.problems.append(f"ranks ran on {len(hosts)} node(s) ({', '.join(hosts)}), not on {result.nodes}")
    expected_sum = RANKS * (RANKS + 1) // 2
    banner = VENDOR_BANNERS[pair.host.vendor]  # a site names one of MPI_VENDORS, each with its banner
    targets = [dst.rstrip("/") + "/" for _src, dst in pair.binds]
    for r in result.ranks:
        if r.size != RANKS:
            result.problems.append(f"rank {r.rank} sees {r.size} ranks, not {RANKS} (launcher and "
                                   "container MPI disagree on PMI?)")
        if r.sum != expected_sum:
            result.problems.append(f"rank {r.rank}: allreduce gave {r.sum}, expected {expected_sum}")
        if banner not in r.library_version:
            result.problems.append(f"rank {r.rank}: library reports {r.library_version.splitlines()[0]!r}, "
                                   f"not the host's {banner}")
        if host_libc := [c for c in r.libc if any(c.startswith(t) for t in targets)]:
            result.problems.append(f"rank {r.rank}: the C library mapped from the host bind ({', '.join(host_libc)}), "
                                   "not the image's: a host library dir is on the loader's path")
        if not r.mapped or not all(any(m.startswith(t) for t in targets) for m in r.mapped):
            result.problems.append(f"rank {r.rank}: MPI libraries mapped from {r.mapped}, not from the "
                                   f"host bind ({', '.join(targets)})")
