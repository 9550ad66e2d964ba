"""One training run as the scheduler sees it: nodes x ranks per node x threads per rank."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from kit.errors import KitError
from kit.excerpt import control_character, shown
from kit.site import Site
from kit.site.model import WALLTIME_RE

RUN_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")  # fullmatch: no trailing newline
DEFAULT_WALLTIME = "01:00:00"  # a run's walltime when none is asked for (capped at the site's)
# Flags the batch script sets itself from the run and the site; a second value would fight them.
OWNED_FLAGS = ("--threads", "--ranks", "--results", "--site", "--oversubscribe")


@dataclass(frozen=True)
class RunSpec:
    """What varies between the runs of a sweep; everything else comes from the site config."""

    run_id: str
    nodes: int
    ranks_per_node: int
    threads_per_rank: int
    walltime: str
    train_args: tuple[str, ...] = ()
    partition: str | None = None
    account: str | None = None
    validate: bool = False  # after training, gan3d validate on the final checkpoint in the same job

    @property
    def ranks(self) -> int:
        return self.nodes * self.ranks_per_node


@dataclass(frozen=True)
class Checked:
    """A run the site can hold, and what the script must do about it."""

    spec: RunSpec
    hyperthreads: bool  # more threads than physical cores: gan3d needs --oversubscribe
    warnings: list[str] = field(default_factory=list)


def matching(train_args: tuple[str, ...], flags: tuple[str, ...]) -> list[str]:
    """The arguments that name one of ``flags``, abbreviated or not (argparse takes any unique
    prefix).
    """
    return [
        a
        for a in train_args
        if a.startswith("--")
        and len(flag := a.split("=", 1)[0]) > 2
        and any(f.startswith(flag) for f in flags)
    ]


def run_id(nodes: int, ranks_per_node: int, threads: int, *, repeat: int | None = None) -> str:
    """`n4-r4-t12`; repeats of one run are `n4-r4-t12-x1`, `-x2`, ... (each its own job and
    result).
    """
    return f"n{nodes}-r{ranks_per_node}-t{threads}" + (f"-x{repeat}" if repeat else "")


def walltime(asked: str | None, max_walltime: str) -> str:
    """The walltime asked for, else DEFAULT_WALLTIME or the site's maximum if that is shorter."""
    if asked:
        return asked
    return DEFAULT_WALLTIME if seconds(DEFAULT_WALLTIME) <= seconds(max_walltime) else max_walltime


def seconds(walltime: str) -> int:
    """[D-]HH:MM:SS in seconds (the format the site schema admits)."""
    days, _, clock = walltime.rpartition("-")
    h, m, s = (int(x) for x in clock.split(":"))
    return (int(days) if days else 0) * 86400 + h * 3600 + m * 60 + s


def default_threads(site: Site, ranks_per_node: int) -> int:
    """One thread per physical core, shared evenly (the paper's 1x48, 4x12 layouts)."""
    return max(1, site.node.cores // max(1, ranks_per_node))


def one_machine(site: Site, nodes: list[int]) -> None:
    """A site without a batch system (scheduler.type local) runs everything on this one machine."""
    more = sorted({n for n in nodes if n != 1})
    if more:
        raise KitError(
            f"--nodes {','.join(map(str, more))}: "
            f"site {site.name} has no scheduler (scheduler.type local): its runs run on this one machine",
            fix="--nodes 1",
        )


def check_run(site: Site, spec: RunSpec, *, here: bool = False) -> Checked:
    """Refuse what the site cannot run, naming the field and the fix, before anything is queued.
    ``here``: the run may run on this machine when the site has no batch system (kit scale
    submit); without it such a site is refused (a batch script needs Slurm)."""
    where = f"site {site.name}" + (f" ({Path(site.path).resolve()})" if site.path else "")
    if site.scheduler.type != "slurm" and not here:
        raise KitError(
            f"scheduler.type is {site.scheduler.type!r}, not slurm: "
            "there is no batch system to submit to",
            fix="run sweeps on this machine with `kit scale plan` and `kit scale submit` (kit docs "
            "howto/scaling-study)",
            where=where,
        )
    if site.scheduler.type == "local":
        one_machine(site, [spec.nodes])
    if not RUN_ID_RE.fullmatch(spec.run_id):
        raise KitError(
            f"run id {shown(spec.run_id)}: not a run id",
            fix="use letters, digits, '.', '_', '-' (at most 64)",
        )
    if not 1 <= spec.nodes <= site.scheduler.max_nodes:
        raise KitError(
            f"--nodes {spec.nodes}: "
            f"{where} allows 1..{site.scheduler.max_nodes} (scheduler.max_nodes)",
            fix=f"give 1..{site.scheduler.max_nodes} nodes",
        )
    if spec.ranks_per_node < 1 or spec.threads_per_rank < 1:
        raise KitError(
            f"{spec.ranks_per_node} rank(s) per node x {spec.threads_per_rank} thread(s)",
            fix="give at least 1 of each",
        )
    node = site.node
    wanted = spec.ranks_per_node * spec.threads_per_rank
    if wanted > node.hardware_threads:
        fit = node.hardware_threads // spec.ranks_per_node
        fix = f"--threads {fit}" if fit else f"at most {node.hardware_threads} ranks per node"
        raise KitError(
            f"{spec.ranks_per_node} rank(s) per node x {spec.threads_per_rank} thread(s) = {wanted}, "
            f"but a {site.name} node has {node.cores} cores x {node.threads_per_core} hardware "
            f"threads = {node.hardware_threads}",
            fix=f"{fix}",
        )
    if not WALLTIME_RE.fullmatch(spec.walltime):
        raise KitError(
            f"--walltime {shown(spec.walltime)}: not a walltime", fix="write HH:MM:SS or D-HH:MM:SS"
        )
    if seconds(spec.walltime) > seconds(site.scheduler.max_walltime):
        raise KitError(
            f"--walltime {spec.walltime}: "
            f"{where} allows at most {site.scheduler.max_walltime} (scheduler.max_walltime)",
            fix=f"give at most {site.scheduler.max_walltime}",
        )
    for arg in spec.train_args:
        if bad := control_character(arg):
            raise KitError(
                f"training argument {shown(arg)} contains a control character ({bad})",
                fix="one line of printable text per argument",
            )
    owned = matching(spec.train_args, OWNED_FLAGS)
    if owned:
        raise KitError(
            f"training arguments {' '.join(owned)}: "
            f"the batch script sets {', '.join(OWNED_FLAGS)} itself from the run and the site",
            fix="drop them",
        )
    hyper = wanted > node.cores
    warnings = (
        [
            f"{wanted} threads on {node.cores} cores: "
            "the run uses hyperthreads (the paper's 2 x 48 layout on SuperMUC-NG)"
        ]
        if hyper
        else []
    )
    return Checked(spec, hyper, warnings)
