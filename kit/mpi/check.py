"""`kit mpi check`: prove a pair with 2 real ranks under the site's launcher, on this machine or, on
a Slurm site, on 2 nodes (one rank each: the ranks then talk over the network)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Callable

from gan3d.runtime import world_size_refusal
from kit.errors import KitError
from kit.excerpt import clipped
from kit.interrupt import reap
from kit.mpi.imagefs import image_kind
from kit.mpi.launch import FIX_MISSING, launcher_now
from kit.mpi.mapped import judge_components, judge_libraries
from kit.mpi.pair_builder import Pair
from kit.site.model import VENDOR_BANNERS

RANKS = 2
NODES = (1, 2)  # a node count RANKS divides: the same ranks per node
# s before the timeout at which a check that hangs is stopped (SIGTERM, then SIGKILL)
STOP_GRACE = 5.0
WATCH = 1.0  # s between two looks at the launcher's processes
RUN_MARK = "KIT_CHECK_RUN"  # the variable whose value marks one check's processes
SHM = Path("/dev/shm")  # where ch-run --join keeps a peer group's segment and semaphore
MCA_MARK = "/mca_"  # Open MPI's components are DIR/mca_<framework>_<name>.so
# rank 0's report, line I of N (rank_report.py)
REPORT_LINE = re.compile(r"KITCHECK (\d{1,6}) (\d{1,6}) (.*)")
# a launcher's lines that say why ranks ended, most telling first: a signal (hydra's "KILLED BY
# SIGNAL: 11", mpirun's "exited on signal"), then an exit code or an error
TELLING = (
    re.compile(r"\bsignal\b", re.IGNORECASE),
    re.compile(r"exit (?:code|status)|error|abort|killed|not found|refused|denied", re.IGNORECASE),
)
# srun's account of its own clean-up once a rank ended badly
# (--kill-on-bad-exit): the effect, never the cause
AFTERMATH = re.compile(
    r"srun: (?:launch/slurm: _step_signal: Terminating|Job step aborted|"
    r"error: .*(?:STEP|JOB) \S+ (?:ON \S+ )?CANCELLED|Force Terminated)"
)


@dataclass
class RankReport:
    rank: int
    size: int
    host: str
    library_version: str
    mapped: list[str]
    sum: int
    libc: list[str] = field(default_factory=list)  # where the C library was mapped from
    libs: list[str] = field(default_factory=list)  # every shared object mapped

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
        raise KitError(
            f"site {site.name}: a {nodes}-node check needs Slurm (scheduler.type: "
            "slurm and salloc on PATH)",
            fix="run it on the site's login node, or with --nodes 1",
        )
    partition = [f"--partition={site.scheduler.partition}"] if site.scheduler.partition else []
    return [
        "salloc",
        "--quiet",
        f"--nodes={nodes}",
        f"--ntasks-per-node={per_node}",
        *partition,
        "--time=5",
    ]


def run_check(
    pair: Pair, *, python: str = "python3", timeout: float = 120.0, nodes: int = 1
) -> CheckResult:
    """Launch RANKS ranks of mpi4py in the pair's image, each in the site's container runtime
    (ch-run, udocker: kit.runtime), on `nodes` nodes and judge what they report."""
    if timeout < 2 * STOP_GRACE:
        raise KitError(
            f"--timeout {timeout:g}: too short (the last {STOP_GRACE:g} s stop a check that hangs)",
            fix=f"give at least {2 * STOP_GRACE:g} s",
        )
    if nodes not in NODES:
        raise KitError(
            f"--nodes {nodes}: the check runs {RANKS} ranks",
            fix=f"give one of {', '.join(map(str, NODES))}",
        )
    image = Path(pair.image)
    runtime = pair.launch.runtime
    runtime.ready(pair.site, str(image), image_kind(image))  # the image's form, the runtime's tools
    if pair.missing:
        raise KitError(
            f"{image}: the image lacks what the pair binds onto: {', '.join(pair.missing)}",
            fix=f"{FIX_MISSING}",
        )
    launcher, join = launcher_command(pair, RANKS, nodes)
    program = resources.files("kit.mpi").joinpath("rank_report.py").read_text()
    env = dict(os.environ)
    env.setdefault("USER", "root")
    env.update(pair.site.host_mpi.launch_env)  # the launcher side sees the site's MPI settings too
    env.update(runtime.check_env(pair.site))
    # the ranks' own, where the runtime wants one
    with tempfile.TemporaryDirectory(prefix="kit-check-") as workdir:
        chrun = pair.launch.run_args(str(image), join=join)
        cmd = launcher + chrun + [python, "-c", program]
        result = CheckResult(
            command=launcher + chrun + [python, "-c", "<kit/mpi/rank_report.py>"], nodes=nodes
        )
        try:
            returncode, result.output, timed_out = _run_bounded(
                cmd, env, timeout, cwd=workdir if runtime.private_workdir else None
            )
        finally:
            _remove_join_group(join)
    _read_reports(result, runtime.rank_view(pair.launch, str(image)))
    if timed_out:
        result.problems.append(
            _no_report(
                f"the ranks did not finish within {timeout:.0f} s; "
                "every process of the check was stopped",
                result.output,
                stopped=True,
            )
        )
        return result
    _judge(pair, returncode, result)
    return result


def _remove_join_group(join: list[str]) -> None:
    """The files of this check's ch-run --join peer group on this node, once every process of the
    check has ended: a rank stopped or crashed leaves them in /dev/shm, named by the check's tag
    (one per check, never another's: launcher_command)."""
    tag = next(w.split("=", 1)[1] for w in join if w.startswith("--join-tag="))
    for name in (f"ch-run_shm-{tag}", f"sem.ch-run_sem-{tag}"):
        try:
            (SHM / name).unlink()
        except FileNotFoundError:
            pass


def _read_reports(result: CheckResult, view: Callable[[str], str] = lambda path: path) -> None:
    """The ranks' reports from rank 0's numbered KITCHECK lines (kit/mpi/rank_report.py), each
    mapped file named by ``view`` as the rank sees it (the runtime's: kit.runtime)."""
    parts: dict[int, str] = {}
    count = 0
    for line in result.output.splitlines():
        if match := REPORT_LINE.fullmatch(line):
            parts[int(match[1])] = match[3]
            count = int(match[2])
    if not parts:
        return
    try:
        if sorted(parts) != list(range(count)):
            raise ValueError(f"{len(parts)} of its {count} lines arrived")
        reports = [RankReport(**r) for r in json.loads("".join(parts[i] for i in range(count)))]
        for r in reports:
            r.mapped, r.libc, r.libs = (
                [view(f) for f in files] for files in (r.mapped, r.libc, r.libs)
            )
        result.ranks += reports
    except (ValueError, TypeError) as exc:
        result.problems.append(f"unreadable rank report ({clipped(str(exc), 200)})")
    result.ranks.sort(key=lambda r: r.rank)


def _run_bounded(
    cmd: list[str], env: dict[str, str], timeout: float, cwd: str | None = None
) -> tuple[int, str, bool]:
    """(status, stdout + stderr, timed out). Every WATCH seconds the launcher's processes are noted:
    its descendants, by parent links, its session's, and those whose environment carries the run's
    mark (a rank forked as its parent is stopped is reparented, in a session of its own, before
    either link is seen; the environment it inherits says whose it is). At the timeout every one
    of them still alive is stopped (a salloc then gives its allocation back, an mpirun its
    daemons; hydra's proxy and ranks, each in a session of its own, and a rank's child in a process
    group of its own go too), and so is whatever the launcher left behind when it ended. Ends
    within ``timeout`` s."""
    token = uuid.uuid4().hex
    mark = f"{RUN_MARK}={token}"
    try:
        proc = subprocess.Popen(
            cmd,
            env={**env, RUN_MARK: token},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
            cwd=cwd,
        )
    except OSError as exc:
        raise KitError(
            f"launcher {cmd[0]}: cannot be started ({exc.strerror})",
            fix="host_mpi.launcher and host_mpi.prefix in the site config must name an installed, "
            "executable launcher",
        ) from None
    known: dict[int, str] = {}  # pid -> its start time (a pid used again is another process)
    deadline = time.monotonic() + timeout - STOP_GRACE
    timed_out = False
    stdout: str | bytes | None  # bytes or None: what a timed-out communicate had read (_text)
    stderr: str | bytes | None
    try:
        while True:
            _note(known, proc.pid, mark)
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            try:
                # retried: no output is lost
                stdout, stderr = proc.communicate(timeout=min(WATCH, left))
                break
            except subprocess.TimeoutExpired:
                continue
    except (
        BaseException
    ):  # Ctrl-C or SIGTERM: the launcher's own session never sees them, so stop it
        _stop(known, proc.pid, mark)
        reap(proc)
        raise
    if timed_out:
        _stop(known, proc.pid, mark)
        try:
            stdout, stderr = proc.communicate(timeout=1)
        except subprocess.TimeoutExpired as late:  # a process born after the last look holds a pipe
            stdout, stderr = late.stdout, late.stderr
            proc.kill()
            reap(proc)
    _stop(known, proc.pid, mark)  # what outlived the launcher
    return proc.returncode, _text(stdout) + _text(stderr), timed_out


def _processes() -> dict[int, tuple[int, int, str, str]]:
    """pid -> (parent, session, start time, state) of every process, from /proc."""
    table = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # ended meanwhile
            continue
        fields = text[text.rindex(")") + 2 :].split()
        table[int(stat.parent.name)] = (int(fields[1]), int(fields[3]), fields[19], fields[0])
    return table


def _note(known: dict[int, str], root: int, mark: str) -> dict[int, tuple[int, int, str, str]]:
    """Add to ``known`` the live processes below ``root`` or below one already known, those of
    root's session (started with start_new_session, so its id is root's pid), and those whose
    environment holds ``mark``."""
    table = _processes()
    grew = True
    while grew:
        grew = False
        for pid, (parent, session, start, state) in table.items():
            if (
                pid not in known
                and state != "Z"
                and (pid == root or session == root or parent in known)
            ):
                known[pid] = start
                grew = True
    needle = b"\0" + mark.encode() + b"\0"
    for pid, (_, _, start, state) in table.items():
        if pid not in known and state != "Z" and needle in _environ(pid):
            known[pid] = start
    return table


def _environ(pid: int) -> bytes:
    """The process's environment, framed by NULs (empty: ended, or not ours to read)."""
    try:
        return b"\0" + Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return b""


def _stop(known: dict[int, str], root: int, mark: str) -> None:
    """SIGTERM every known process still alive, SIGKILL what is left STOP_GRACE - 1 seconds
    later.
    """
    for sig, grace in ((signal.SIGTERM, STOP_GRACE - 1), (signal.SIGKILL, 1.0)):
        deadline = time.monotonic() + grace
        alive = _alive(known, _note(known, root, mark))
        for pid in alive:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        while alive and time.monotonic() < deadline:
            time.sleep(0.1)
            alive = _alive(known, _note(known, root, mark))
        if not alive:
            return


def _alive(known: dict[int, str], table: dict[int, tuple[int, int, str, str]]) -> list[int]:
    """The known processes still running: same pid and start time, not a zombie."""
    return [
        pid
        for pid, start in known.items()
        if pid in table and table[pid][2] == start and table[pid][3] != "Z"
    ]


def _text(data: str | bytes | None) -> str:
    return data.decode(errors="replace") if isinstance(data, bytes) else data or ""


def _status(returncode: int) -> str:
    """A launcher's exit status, with the signal it stands for."""
    number = -returncode if returncode < 0 else returncode - 128
    if number > 0 and number in signal.valid_signals():
        how = "killed by" if returncode < 0 else "128 + "
        return f"{returncode} ({how}{signal.Signals(number).name})"
    return str(returncode)


def _no_report(what: str, output: str, stopped: bool = False) -> str:
    """One line for ranks that ended, or were ``stopped``, without a report: how many got through
    MPI_Init, and for ranks that ended the launcher's most telling line (a signal, an exit code, an
    error; srun's clean-up after a rank failed only where nothing else was said), else its last."""
    init = {
        line.split()[1]
        for line in output.splitlines()
        if line.startswith("KITINIT ") and len(line.split()) == 2
    }
    hint = ""
    if stopped:
        hint = (
            " (a rank that never reached it, or a launcher waiting for a peer that never started)"
            if len(init) < RANKS
            else " (then stuck: in the allreduce?)"
        )
    lines = [
        line.strip(" =")
        for line in output.splitlines()
        if line.strip(" =") and not line.startswith("KITINIT ")
    ]
    # the cause, where the launcher gave one
    lines = [line for line in lines if not AFTERMATH.match(line)] or lines
    # once stopped, it speaks of the stop
    said = (
        ""
        if stopped
        else next(
            (line for telling in TELLING for line in reversed(lines) if telling.search(line)),
            lines[-1] if lines else "",
        )
    )
    return f"{what}: {len(init)} of {RANKS} ranks finished MPI_Init{hint}" + (
        f"; the launcher says: {clipped(said, 200)}" if said else ""
    )


def _judge(pair: Pair, returncode: int, result: CheckResult) -> None:
    if not result.ranks:  # nothing to judge: one line that says how far the ranks got
        result.problems.insert(
            0,
            _no_report(
                f"no rank reported (launcher exit status {_status(returncode)})", result.output
            ),
        )
        return
    if returncode != 0:
        result.problems.append(f"launcher exited with status {_status(returncode)}")
    sizes = sorted({r.size for r in result.ranks})
    # what each rank then reports, and how many do, follows from this one cause
    if alone := world_size_refusal(sizes, RANKS, "kit mpi check"):
        result.problems.append(alone)
    elif len(result.ranks) != RANKS:
        result.problems.append(f"{len(result.ranks)} of {RANKS} ranks reported")
    hosts = sorted({r.host for r in result.ranks})
    if result.ranks and len(hosts) != result.nodes:
        result.problems.append(
            f"ranks ran on {len(hosts)} node(s) ({', '.join(hosts)}), not on {result.nodes}"
        )
    expected_sum = RANKS * (RANKS + 1) // 2
    # a site names one of MPI_VENDORS, each with its banner
    banner = VENDOR_BANNERS[pair.host.vendor]
    targets = [dst.rstrip("/") + "/" for _src, dst in pair.binds]
    for r in result.ranks:
        # in a world of another size it follows from that
        if r.sum != expected_sum and sizes == [RANKS]:
            result.problems.append(
                f"rank {r.rank}: allreduce gave {r.sum}, expected {expected_sum}"
            )
        if banner not in r.library_version:
            result.problems.append(
                f"rank {r.rank}: library reports {r.library_version.splitlines()[0]!r}, "
                f"not the host's {banner}"
            )
        if host_libc := [c for c in r.libc if any(c.startswith(t) for t in targets)]:
            result.problems.append(
                f"rank {r.rank}: the C library mapped from the host bind ({', '.join(host_libc)}), "
                "not the image's: a host library dir is on the loader's path"
            )
        if not r.libraries or not all(any(m.startswith(t) for t in targets) for m in r.libraries):
            result.problems.append(
                f"rank {r.rank}: MPI libraries mapped from {r.libraries}, "
                f"not from the host bind ({', '.join(targets)})"
            )
        result.problems += judge_libraries(pair, r) + judge_components(pair, r)
