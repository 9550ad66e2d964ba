"""`kit mpi check`: prove a pair on this machine with 2 real ranks under the site's launcher."""
from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from kit.errors import KitError
from kit.mpi.imagefs import image_kind
from kit.mpi.openmpi_launch import is_openmpi_mpirun, root_words
from kit.mpi.pair import FIX_MISSING, Pair

VENDOR_BANNER = {"intel": "Intel(R) MPI Library", "mpich": "MPICH", "mvapich2": "MVAPICH2",
                 "openmpi": "Open MPI", "cray-mpich": "CRAY MPICH", "parastation": "MPICH"}
RANKS = 2


@dataclass
class RankReport:
    rank: int
    size: int
    library_version: str
    mapped: list[str]
    sum: int


@dataclass
class CheckResult:
    command: list[str]
    ranks: list[RankReport] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    output: str = ""

    @property
    def ok(self) -> bool:
        return not self.problems and len(self.ranks) == RANKS


def launcher_command(pair: Pair, ranks: int) -> tuple[list[str], list[str]]:
    """(launcher argv, extra ch-run join args) for the site's launcher on this machine."""
    site = pair.site
    words = shlex.split(site.host_mpi.launcher)
    join = [f"--join-ct={ranks}", f"--join-tag=kitcheck-{os.getpid()}"]
    if is_openmpi_mpirun(site):
        words[1:1] = root_words(site)
    if words[0] in ("mpiexec", "mpirun", "mpiexec.hydra"):
        exe = Path(site.host_mpi.prefix) / "bin" / words[0]
        if not exe.is_file():
            raise KitError(f"site {site.name}: host_mpi.launcher {words[0]!r} is not at {exe}; fix "
                           "host_mpi.prefix in the site config")
        return [str(exe), *words[1:], "-n", str(ranks)], join
    if words[0] == "srun":
        plugin = [f"--mpi={site.scheduler.mpi_plugin}"] if site.scheduler.mpi_plugin else []
        return [*words, *plugin, "-N", "1", "-n", str(ranks)], ["--join", join[1]]  # srun gives the count
    exe = shutil.which(words[0])
    if exe is None:
        raise KitError(f"site {site.name}: launcher {words[0]!r} not found on PATH")
    return [exe, *words[1:], "-n", str(ranks)], join


def run_check(pair: Pair, python: str = "python3", timeout: float = 120.0) -> CheckResult:
    """Launch RANKS ranks of ch-run + mpi4py in the pair's image and judge what they report."""
    image = Path(pair.image)
    if image_kind(image) in ("tar", "source"):
        raise KitError(f"{image}: ch-run needs a directory or SquashFS image; convert it first "
                       "(kit image convert IMAGE OUT.sqfs --site SITE)")
    if pair.missing:
        raise KitError(f"{image}: the image lacks what the pair binds onto: {', '.join(pair.missing)}; "
                       f"fix: {FIX_MISSING}")
    if shutil.which("ch-run") is None:
        raise KitError("ch-run not found: install Charliecloud (Debian package charliecloud)")
    launcher, join = launcher_command(pair, RANKS)
    chrun = pair.ch_run_args(str(image), join=join)
    program = resources.files("kit.mpi").joinpath("rank_report.py").read_text()
    cmd = launcher + chrun + [python, "-c", program]
    env = dict(os.environ)
    env.setdefault("USER", "root")
    env.update(pair.site.host_mpi.launch_env)  # the launcher side sees the site's MPI settings too
    result = CheckResult(command=launcher + chrun + [python, "-c", "<kit/mpi/rank_report.py>"])
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        result.problems.append(f"ranks did not finish within {timeout:.0f} s")
        return result
    result.output = proc.stdout + proc.stderr
    for line in proc.stdout.splitlines():
        if line.startswith("KITCHECK "):
            try:
                result.ranks += [RankReport(**r) for r in json.loads(line[len("KITCHECK "):])]
            except (ValueError, TypeError) as exc:
                result.problems.append(f"unreadable rank report ({exc}): {line[:200]}")
    result.ranks.sort(key=lambda r: r.rank)
    _judge(pair, proc.returncode, result)
    return result


def _judge(pair: Pair, returncode: int, result: CheckResult) -> None:
    if returncode != 0:
        result.problems.append(f"launcher exited with status {returncode}")
    if len(result.ranks) != RANKS:
        result.problems.append(f"{len(result.ranks)} of {RANKS} ranks reported")
    expected_sum = RANKS * (RANKS + 1) // 2
    banner = VENDOR_BANNER.get(pair.host.vendor, "")
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
        if not r.mapped or not all(any(m.startswith(t) for t in targets) for m in r.mapped):
            result.problems.append(f"rank {r.rank}: MPI libraries mapped from {r.mapped}, not from the "
                                   f"host bind ({', '.join(targets)})")
