"""Pilot mode: one Slurm job of N nodes runs a study's
evaluations back to back (the Swift/T pattern).

Queue waits dominate short evaluations on a busy machine; a pilot pays one. The proposing stays with
the driver on the login node: for each new config it writes the evaluation's commands to
DIR/evals/eNNNN/eval.json and an empty entry DIR/queue/eNNNN. Inside the job, `parallel` workers
(`python -m kit.study.pilot DIR`) each claim an entry by renaming it into DIR/claimed/ (rename is
atomic: exactly one worker wins), run it with `kit.study.evalproc` (training as a step of the
allocation through the site's launcher, in the study's image with the pair's binds as a batch script
runs it, or bare without an image; then validation if the objective needs it; one results file per
evaluation), and take the next. The driver reads each evaluation's exit.json as for local runs and
records it in the same ledger. When the budget is spent the driver writes DIR/queue/.stop and the
workers end; a pilot job that ends early (walltime, node failure) leaves its claimed evaluations
without an exit: the driver queues them again and submits a new pilot.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
import time
from pathlib import Path

from kit.atomic import atomic_write_text
from kit.errors import KitError
from kit.excerpt import shown
from kit.mpi.launch import JOIN_TAG_LINE
from kit.mpi.pair_reader import PairFile, read_pair_file
from kit.readfile import read_text
from kit.runtime import runtime_of
from kit.site import Site, SiteError
from kit.site.load import MAX_SITE_BYTES
from kit.slurm.jobs import is_active, job_states, sbatch, scancel, wait_gone
from kit.slurm.ledger import latest_job, locked, read_jobs, record_job
from kit.slurm.script import (
    SAFE_PATH,
    RunFiles,
    container_view,
    job_env,
    job_exports,
    scheduler_directives,
)
from kit.study import evalproc
from kit.study.backends import LOST, RUNNING, Outcome, _outcome, ended, site_config
from kit.study.evaluate import (
    EvalRun,
    checked_eval_dir,
    checkpoints_aside,
    eval_dir,
    layout_args,
    make_subdir,
    with_validation,
)

QUEUE, CLAIMED, PILOT = "queue", "claimed", "pilot"
STOP = ".stop"
ENTRY_RE = re.compile(r"e[0-9]{4,6}")
IDLE_SECONDS = 900.0  # a worker with nothing queued for this long ends (the driver may be gone)


def inside_commands(
    run: EvalRun, study_dir: Path, site: Site, *, python: str, pair: PairFile | None = None
) -> list[list[str]]:
    """The evaluation's commands as steps of the pilot's allocation, through the site's launcher
    (srun gives each step its ranks and cores): in the image with the pair's binds and environment,
    as a batch script runs them (kit.slurm.script), or, without a pair, the site's own Python."""
    files = RunFiles(eval_dir(study_dir, run.eval_id).absolute(), run.eval_id)
    site_file = str(site.path) if pair is None else str(files.site_file)
    train = [
        python,
        "-m",
        "gan3d",
        "train",
        "--site",
        site_file,
        *layout_args(run, site),
        "--results",
        str(files.result),
        *run.train_args,
    ]
    commands = with_validation(run, files, python=python, train=train)
    if pair is None:
        return [_bare_step(site, run.ranks_per_node, run.threads) + commands[0], *commands[1:]]
    return [
        _container_step(site, pair, run, files, words, ranks)
        for words, ranks in zip(commands, (run.ranks_per_node, 1))
    ]


def _step_options(site: Site, ranks: int, threads: int) -> list[str]:
    """srun's options for one step of a running allocation (none for another launcher)."""
    if shlex.split(site.host_mpi.launcher)[0] != "srun":
        return []
    return ["--nodes=1", f"--ntasks={ranks}", f"--cpus-per-task={threads}", "--exact"]


def _bare_step(site: Site, ranks: int, threads: int) -> list[str]:
    words = shlex.split(site.host_mpi.launcher)
    if words[0] == "srun":
        plugin = [f"--mpi={site.scheduler.mpi_plugin}"] if site.scheduler.mpi_plugin else []
        return [*words, *plugin, *_step_options(site, ranks, threads)]
    return [*words, "-n", str(ranks)]


def _container_step(
    site: Site, pair: PairFile, run: EvalRun, files: RunFiles, words: list[str], ranks: int
) -> list[str]:
    """One step in the image: the batch script's environment and launch line (ch-run with the pair's
    binds; host paths as the container sees them), run by bash for the shell words it leaves."""
    inside = container_view(pair, files.run_dir, run.train_args)
    threads = run.threads
    hyper = run.ranks_per_node * run.threads > site.node.cores
    # steps side by side: a peer group each
    line = pair.launch_line(
        " ".join(shlex.quote(inside(w)) for w in words),
        hwthreads=hyper,
        exports=job_exports(pair),
        step=_step_options(site, ranks, threads),
        group=run.eval_id,
    )
    env = [*job_env(site, pair, threads), f"NRANKS={int(ranks)}", f"RANKS_PER_NODE={int(ranks)}"]
    return ["bash", "-c", "set -euo pipefail\n" + "\n".join([*env, line])]


def render_pilot(
    site: Site,
    study_dir: Path,
    *,
    nodes: int,
    workers: int,
    walltime: str,
    python: str,
    join: bool = False,
) -> str:
    """The pilot's batch script; every value checked or quoted (#SBATCH lines are read without a
    shell). ``join``: its steps run ch-run --join, in peer groups named from the job start's tag,
    exported for the `bash -c` of each step (kit.mpi.launch.JOIN_TAG_LINE)."""
    d = study_dir.absolute()
    if not SAFE_PATH.fullmatch(str(d)):
        raise KitError(
            f"study dir {shown(str(d))}: sbatch reads #SBATCH --output without a shell",
            fix="use an absolute path of letters, digits and ._/+- only",
        )
    directives = scheduler_directives(site)  # the constraint too: the pilot needs the same nodes
    worker = " ".join(shlex.quote(w) for w in (python, "-m", "kit.study.pilot", str(d)))
    return "\n".join(
        [
            "#!/bin/bash",
            f"# kit study pilot: {workers} worker(s) run the evaluations queued in {d}/queue, back to back.",
            "#SBATCH --job-name=kit-study-pilot",
            f"#SBATCH --nodes={int(nodes)}",
            f"#SBATCH --time={walltime}",
            f"#SBATCH --output={d}/{PILOT}/pilot-%j.out",
            "#SBATCH --exclusive",
            *directives,
            "set -uo pipefail",
            'export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"',
            *([JOIN_TAG_LINE] if join else []),
            f"for i in $(seq {int(workers)}); do {worker} & done",
            "wait",
            "",
        ]
    )


class PilotBackend:
    """Evaluations queued in DIR for the pilot job's workers; the pilot itself submitted as
    needed.
    """

    how = "pilot"

    def __init__(
        self,
        study_dir: Path,
        site: Site,
        objective: str,
        walltime: str,
        nodes: int,
        workers: int,
        python: str,
        pair: str | None = None,
    ):
        self.study_dir, self.site, self.objective = study_dir, site, objective
        self.walltime, self.nodes, self.workers, self.python = walltime, nodes, workers, python
        # None: the site's own Python, bare
        self.pair = read_pair_file(pair, site) if pair else None
        self.pilot_dir = study_dir / PILOT
        for sub in (QUEUE, CLAIMED, PILOT):
            make_subdir(study_dir / sub, "kit study run")

    def _pilot_job(self) -> str | None:
        """The pilot job now queued or running, if any."""
        job = latest_job(read_jobs(self.pilot_dir), PILOT)
        return job if job and is_active(job_states([job])[job]) else None

    def _ensure_pilot(self) -> str:
        with locked(self.pilot_dir):
            job = self._pilot_job()
            if job:
                return job
            (self.study_dir / QUEUE / STOP).unlink(missing_ok=True)
            script = self.pilot_dir / "pilot.sbatch"
            atomic_write_text(
                script,
                render_pilot(
                    self.site,
                    self.study_dir,
                    nodes=self.nodes,
                    workers=self.workers,
                    walltime=self.walltime,
                    python=self.python,
                    join=self.pair is not None and runtime_of(self.site).job_tag(self.site),
                ),
                perm=0o755,
            )
            job = sbatch(script)
            record_job(self.pilot_dir, PILOT, job)
            return job

    def start(self, run: EvalRun) -> dict:
        d = checked_eval_dir(self.study_dir, run.eval_id)
        if not (evalproc.is_running(d) or evalproc.exit_status(d) is not None):
            checkpoints_aside(d)  # a lost attempt's (gan3d train refuses a fresh run into them)
            make_subdir(d / "results")
            commands = inside_commands(
                run, self.study_dir, self.site, python=self.python, pair=self.pair
            )
            # the container reads the site config from the evaluation's dir
            if self.pair is not None:
                runtime_of(self.site).prepare(self.site)  # what the runtime needs written first
                files = RunFiles(d, run.eval_id)
                make_subdir(files.site_file.parent)
                atomic_write_text(
                    files.site_file,
                    read_text(
                        site_config(self.site), "site config", limit=MAX_SITE_BYTES, error=SiteError
                    ),
                )
            atomic_write_text(
                d / evalproc.PLAN, json.dumps({"commands": commands}, indent=1) + "\n"
            )
            (self.study_dir / CLAIMED / run.eval_id).unlink(missing_ok=True)
            atomic_write_text(self.study_dir / QUEUE / run.eval_id, "")
        return {"how": self.how, "job": self._ensure_pilot()}

    def poll(self, eval_id: str) -> Outcome | str:
        d = checked_eval_dir(self.study_dir, eval_id, create=False)
        status = ended(d)
        if isinstance(status, str):  # RUNNING, the one text ended() returns
            return RUNNING
        if status is None:
            if (self.study_dir / QUEUE / eval_id).exists():
                self._ensure_pilot()  # queued: a pilot must be there to take it
                return RUNNING
            if (self.study_dir / CLAIMED / eval_id).exists() and self._pilot_job():
                return RUNNING  # claimed by a worker of a live pilot: its lock is about to be taken
            return LOST
        problem = (
            None if status["code"] == 0 else f"step {status.get('step')} exited {status['code']}"
        )
        return _outcome(RunFiles(d, eval_id).result, self.objective, problem, d / evalproc.LOG)

    def cancel(self, eval_ids: list[str]) -> list[str]:
        for eid in eval_ids:
            (self.study_dir / QUEUE / eid).unlink(missing_ok=True)
        job = self._pilot_job()
        if job:
            scancel([job])
            wait_gone([job])
        return list(eval_ids) if job else []

    def finish(self) -> None:
        """Nothing more will be queued: the workers end when the queue is empty."""
        atomic_write_text(self.study_dir / QUEUE / STOP, "")


def claim(study_dir: Path) -> str | None:
    """Take the first queued evaluation (atomic rename: one worker wins each); None if none is
    queued.
    """
    queue = study_dir / QUEUE
    for name in sorted(os.listdir(queue)):
        if not ENTRY_RE.fullmatch(name):
            continue
        try:
            os.rename(queue / name, study_dir / CLAIMED / name)
        except FileNotFoundError:  # another worker was first
            continue
        return name
    return None


def worker(study_dir: Path, idle_seconds: float = IDLE_SECONDS) -> int:
    """Run queued evaluations until the driver says stop (and the queue is empty) or none comes for
    a while.
    """
    idle_since = time.monotonic()
    while True:
        name = claim(study_dir)
        if name is not None:
            evalproc.main(eval_dir(study_dir, name).absolute())
            idle_since = time.monotonic()
            continue
        if (study_dir / QUEUE / STOP).exists() or time.monotonic() - idle_since > idle_seconds:
            return 0
        time.sleep(1.0)


if __name__ == "__main__":
    sys.exit(worker(Path(sys.argv[1])))
