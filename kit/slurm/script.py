"""Render the batch script of one run from slurm/run.sbatch, the site and (in a container) the
pair.
"""

from __future__ import annotations

import functools
import re
import shlex
import string
from dataclasses import dataclass
from pathlib import Path

from kit.atomic import atomic_write_text, own_dir
from kit.data import shipped
from kit.errors import KitError
from kit.excerpt import control_character, shown
from kit.mpi.launch import JOIN_TAG_LINE, launcher_words, translate, under
from kit.mpi.openmpi_launch import JOB_EXPORTS
from kit.mpi.pair_reader import PairFile
from kit.readfile import read_text
from kit.runtime import runtime_of
from kit.site import Site, SiteError
from kit.site.load import MAX_SITE_BYTES
from kit.site.model import FILE_FIX, SLURM_WORD_RE
from kit.slurm.spec import Checked, RunSpec

TEMPLATE = shipped("slurm", "run.sbatch")
# #SBATCH lines are parsed by sbatch, not a shell: only values that need no quoting go there
# (fullmatch: a trailing newline would end the #SBATCH block early).
SAFE_PATH = re.compile(r"/[A-Za-z0-9._/+-]{0,4000}")
PATH_FLAGS = ("--data", "--validation-data", "--synthetic-dir", "--checkpoint-dir")


def physics_dir(results: Path) -> Path:
    """RESULTS_DIR/RUN.physics/ for RESULTS_DIR/RUN.json: the plots of the run's physics
    validation.
    """
    return results.with_suffix(".physics")


def validation_data(train_args: tuple[str, ...]) -> str | None:
    """The showers gan3d validate compares the generator with: the run's --validation-data, else its
    --data, else the generated showers it keeps in --synthetic-dir."""
    given = dict(path_arguments(train_args))
    return given.get("--validation-data") or given.get("--data") or given.get("--synthetic-dir")


class _Template(string.Template):
    delimiter = "@"  # the script's own ${...} stay for the shell


@functools.lru_cache(maxsize=1)
def _template() -> _Template:
    """Read once per process: a sweep renders every run from it."""
    return _Template(TEMPLATE.read_text())


@dataclass(frozen=True)
class RunFiles:
    """Where one run keeps its script, log and result inside a run directory."""

    run_dir: Path
    run_id: str

    @property
    def script(self) -> Path:
        return self.run_dir / "scripts" / f"{self.run_id}.sbatch"

    @property
    def result(self) -> Path:
        """The one results JSON the run's job writes."""
        return self.run_dir / "results" / f"{self.run_id}.json"

    @property
    def log_pattern(self) -> Path:
        return self.run_dir / "logs" / f"{self.run_id}-%j.out"

    def log(self, job_id: str) -> Path:
        return self.run_dir / "logs" / f"{self.run_id}-{job_id}.out"

    @property
    def checkpoints(self) -> Path:
        """Where a validated run's training checkpoints each epoch (gan3d validate reads the
        last).
        """
        return self.run_dir / "checkpoints" / self.run_id

    @property
    def physics_dir(self) -> Path:
        """gan3d validate's plots, next to the results (its score goes into the results JSON)."""
        return physics_dir(self.result)

    def validate_log(self, job_id: str) -> Path:
        return self.run_dir / "logs" / f"{self.run_id}-{job_id}.validate.out"

    @property
    def site_file(self) -> Path:
        """Each run its own copy: a later submission with another config must not change a queued
        job.
        """
        return self.run_dir / "scripts" / f"{self.run_id}.site.yaml"


def scheduler_directives(
    site: Site, partition: str | None = None, account: str | None = None
) -> list[str]:
    """The site's (or the run's) partition, account and constraint as #SBATCH lines: sbatch reads
    them without a shell, so each value must be a plain Slurm word."""
    out = []
    for flag, value, key in (
        ("partition", partition or site.scheduler.partition, "scheduler.partition"),
        ("account", account or site.scheduler.account, "scheduler.account"),
        ("constraint", site.scheduler.constraint, "scheduler.constraint"),
    ):
        if value is None:
            continue
        if not SLURM_WORD_RE.fullmatch(value):
            raise KitError(
                f"{key} {shown(value)}: not a Slurm name",
                fix="use letters, digits and ._,:+- only",
            )
        out.append(f"#SBATCH --{flag}={value}")
    return out


def render(
    site: Site, run: Checked, files: RunFiles, *, pair: PairFile | None, python: str = "python3"
) -> str:
    """The batch script text. ``pair`` None runs the host's Python without a container."""
    spec = run.spec
    if not SAFE_PATH.fullmatch(str(files.run_dir)):
        raise KitError(
            f"run dir {shown(str(files.run_dir))}: sbatch reads #SBATCH --output without a shell",
            fix="use an absolute path of letters, digits and ._/+- only",
        )
    if bad := control_character(python):
        raise KitError(
            f"--python {shown(python)} contains a control character ({bad})",
            fix="the path of the Python that runs gan3d",
        )
    directives = scheduler_directives(site, spec.partition, spec.account)
    if run.hyperthreads:
        directives.append("#SBATCH --hint=multithread")
    # Slurm counts hardware threads: one rank's threads on whole cores
    elif site.node.threads_per_core > 1:
        directives.append("#SBATCH --hint=nomultithread")
    checkpoints = _checkpoints(spec, files)
    train = train_words(run, files, python=python, site_file=files.site_file)
    validate = _validate_words(spec, files, python, checkpoints) if spec.validate else []
    exports = job_exports(pair)
    head, _ = launcher_words(site, run.hyperthreads, exports)
    env = job_env(site, pair, spec.threads_per_rank)
    if pair is None:
        launch, check = (
            " ".join(head + [shlex.quote(w) for w in words]) for words in (train, validate)
        )
    else:
        inside = container_view(pair, files.run_dir, spec.train_args)
        launch, check = (
            pair.launch_line(
                " ".join(shlex.quote(inside(w)) for w in words),
                hwthreads=run.hyperthreads,
                exports=exports,
            )
            for words in (train, validate)
        )
    modules = ""
    if site.modules:
        modules = (
            "if ! command -v module >/dev/null 2>&1 && [ -r /etc/profile.d/modules.sh ]; then\n"
            "  . /etc/profile.d/modules.sh\nfi\n"
            "module load "
            + " ".join(shlex.quote(m) for m in site.modules)
            + ' || { echo "kit: module load failed (modules in the site config)" >&2; exit 1; }'
        )
    return _template().substitute(
        run_id=spec.run_id,
        site=site.name,
        job_name=f"gan3d-{spec.run_id}",
        nodes=spec.nodes,
        ranks_per_node=spec.ranks_per_node,
        threads=spec.threads_per_rank,
        walltime=spec.walltime,
        log=files.log_pattern,
        directives="\n".join(directives),
        modules=modules,
        env="\n".join(env),
        launch=launch,
        join_tag=JOIN_TAG_LINE if pair is not None and runtime_of(site).job_tag(site) else "",
        physics=_physics_step(spec, files, check) if spec.validate else "",
    )


def _checkpoints(spec: RunSpec, files: RunFiles) -> str:
    return dict(path_arguments(spec.train_args)).get("--checkpoint-dir") or str(files.checkpoints)


def train_words(run: Checked, files: RunFiles, *, python: str, site_file: Path) -> list[str]:
    """The run's `gan3d train` command line, one rank's: what its job launches (and what a run on
    a site without a batch system launches under mpiexec)."""
    spec = run.spec
    checkpoints = _checkpoints(spec, files)
    return [
        python,
        "-m",
        "gan3d",
        "train",
        "--site",
        str(site_file),
        "--threads",
        str(spec.threads_per_rank),
        "--ranks",
        str(spec.ranks),  # argv reaches every rank, however its runtime cleans the environment
        "--results",
        str(files.result),
        *(["--oversubscribe"] if run.hyperthreads else []),
        *spec.train_args,
        *(
            ["--checkpoint-dir", checkpoints]
            if spec.validate and checkpoints == str(files.checkpoints)
            else []
        ),
    ]


def job_exports(pair: PairFile | None) -> list[str]:
    """The variables a job's launcher passes on to its ranks."""
    return [*JOB_EXPORTS, *(["KIT_IMAGE_DIGEST"] if pair is not None and pair.digest else [])]


def job_env(site: Site, pair: PairFile | None, threads_per_rank: int) -> list[str]:
    """The `export` lines before a job's launch line (a batch script's, or a pilot's step)."""
    _, srun = launcher_words(site)
    # The launcher (and Hydra's proxies) read the host MPI's settings on the host; inside, the
    # pair's --set-env values (host paths translated) win.
    env = [f"export {k}={shlex.quote(v)}" for k, v in site.host_mpi.launch_env.items()]
    # Slurm >= 22.05: srun no longer reads SLURM_CPUS_PER_TASK (Hydra's own srun must not get it)
    if srun:
        env.append(f"export SRUN_CPUS_PER_TASK={int(threads_per_rank)}")
    # A rank (or Hydra proxy) that dies ends the step: the others would wait in an allreduce until
    # the walltime (srun --kill-on-bad-exit; also read by the srun Hydra starts its proxies with).
    env.append("export SLURM_KILL_BAD_EXIT=1")
    if pair is not None and pair.digest:  # the results name the image they ran on
        env.append(f"export KIT_IMAGE_DIGEST={shlex.quote(pair.digest)}")
    if pair is not None:
        env += runtime_of(site).job_env(site)
    return env


def _validate_words(spec: RunSpec, files: RunFiles, python: str, checkpoints: str) -> list[str]:
    """gan3d validate on the run's last checkpoint; its score goes into the run's results JSON."""
    data = validation_data(spec.train_args)
    if data is None:
        raise KitError(
            f"run {spec.run_id}: --validate needs showers to compare the generator with, "
            "and the training arguments name no --data, --validation-data or --synthetic-dir",
            fix="give --data FILES after --",
        )
    xscale = [
        word
        for _, value in path_arguments(spec.train_args, ("--xscale",))
        for word in ("--xscale", value)
    ]
    return [
        python,
        "-m",
        "gan3d",
        "validate",
        "--checkpoint",
        checkpoints,
        "--data",
        data,
        "--out",
        str(files.physics_dir),
        "--results",
        str(files.result),
        *xscale[-2:],
    ]


def _physics_step(spec: RunSpec, files: RunFiles, check: str) -> str:
    """The batch script's lines after training: one rank (one node) through the same launcher and
    container; a failure is written to the run's validation log and leaves the job's exit alone."""
    # the job id is the shell's (SAFE_PATH has no @)
    before, after = str(files.validate_log("@")).split("@")
    log = shlex.quote(before) + '"${SLURM_JOB_ID}"' + shlex.quote(after)
    return "\n" + "\n".join(
        [
            (
                "# Physics: gan3d validate on the final checkpoint, one rank on one node, "
                "through the same launcher."
            ),
            (
                "# A failed validation marks only the run's physics (kit scale collect shows this log), "
                "not the run."
            ),
            f"VALIDATE_LOG={log}",
            "if ( export NRANKS=1 RANKS_PER_NODE=1 SLURM_NTASKS=1 SLURM_NPROCS=1 SLURM_NNODES=1 "
            "SLURM_JOB_NUM_NODES=1 SLURM_NTASKS_PER_NODE=1",
            f"     {check} ) >\"$VALIDATE_LOG\" 2>&1; then",
            f"  echo \"kit: run {spec.run_id}: physics validated, score in the results\"",
            "else",
            f"  echo \"kit: run {spec.run_id}: physics validation failed (exit $?), see $VALIDATE_LOG\" >&2",
            "fi",
        ]
    )


def path_arguments(
    train_args: tuple[str, ...], flags: tuple[str, ...] = PATH_FLAGS
) -> list[tuple[str, str]]:
    """(flag, value) of the training arguments that name host files or directories (or other
    ``flags``).
    """
    out, args = [], list(train_args)
    for i, arg in enumerate(args):
        flag, eq, value = arg.partition("=")
        if flag in flags:
            value = value if eq else (args[i + 1] if i + 1 < len(args) else "")
            out.append((flag, value))
    return out


def bound(path: str, binds: list[tuple[str, str]]) -> bool:
    """Whether a host path lies in a directory bound into the container."""
    return any(under(path, src) for src, _ in binds)


def container_view(pair: PairFile, run_dir: Path, train_args: tuple[str, ...]):
    """Host paths -> the container's view through the pair's binds (also in --opt=/path and comma
    lists). The run dir and the data must be bound, or the job fails after its wait in the queue."""
    binds = pair.launch.binds
    listed = ", ".join(f"{s}:{d}" for s, d in binds)
    fix = (
        "add SRC:DST covering it to container.binds in the site config and re-run kit image convert "
        "--site (it makes the mount point)"
    )
    if not bound(str(run_dir), binds):
        raise KitError(
            f"run dir {run_dir} is not under any directory {pair.path.name} binds into the "
            f"container ({listed}), so the job could not write its result",
            fix=f"choose a run dir under one of them, or {fix}",
        )
    for flag, value in path_arguments(train_args):
        for part in value.split(","):
            if not part.startswith("/") or not bound(part, binds):
                raise KitError(
                    f"training argument {flag} {part}: the container sees only absolute paths under "
                    f"the directories {pair.path.name} binds ({listed})",
                    fix=f"give such a path, or {fix}",
                )

    def one(word: str) -> str:
        flag, eq, value = word.partition("=") if word.startswith("--") else ("", "", word)
        value = ",".join(translate(p, binds) if p.startswith("/") else p for p in value.split(","))
        return f"{flag}{eq}{value}"

    return one


def write_run(
    site: Site, run: Checked, run_dir: Path, *, pair: PairFile | None, python: str = "python3"
) -> RunFiles:
    """Script, site copy and the log/result dirs, written atomically; the job reads the same
    site config the script was rendered from."""
    files = RunFiles(run_dir.absolute(), run.spec.run_id)
    if site.path is None:
        raise KitError(f"site {site.name}: no config file behind it to give the job", fix=FILE_FIX)
    text = render(site, run, files, pair=pair, python=python)
    if pair is not None:
        # what the job's runtime needs written first (kit-owned files)
        runtime_of(site).prepare(site)
    for sub in ("scripts", "logs", "results"):  # the job writes into them too: never through a link
        own_dir(files.run_dir / sub, f"the run directory's {sub}/")
    atomic_write_text(
        files.site_file, read_text(site.path, "site config", limit=MAX_SITE_BYTES, error=SiteError)
    )
    atomic_write_text(files.script, text, perm=0o755)
    return files
