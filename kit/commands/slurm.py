"""`kit slurm render|submit`: one training run as a batch script, checked against the site."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console

from kit.errors import KitError
from kit.mpi.pair_reader import pair_file_for, read_pair_file
from kit.site import load_site
from kit.slurm import RunFiles, RunSpec, check_run, default_threads, is_active, job_states, render, sbatch, write_run
from kit.slurm.ledger import all_jobs, locked, read_jobs, record_job
from kit.slurm.spec import seconds
from kit.verbosity import quiet

DEFAULT_WALLTIME = "01:00:00"


def add_run_args(p: argparse.ArgumentParser) -> None:
    """Arguments a single run and a sweep share."""
    p.add_argument("--site", required=True, help="site config name or file")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--image", help="the image as the site sees it, or its IMAGE.pair.yaml "
                       "(ch-run with the host MPI bound in)")
    where.add_argument("--no-container", action="store_true",
                       help="run the site's own Python environment, no ch-run (the paper's Tables 5, 6)")
    p.add_argument("--walltime", help=f"HH:MM:SS per job (default {DEFAULT_WALLTIME}, at most the site's)")
    p.add_argument("--python", default="python3", help="the Python that runs gan3d (default python3)")
    p.add_argument("--partition", help="override scheduler.partition")
    p.add_argument("--account", help="override scheduler.account")
    p.add_argument("--dir", type=Path, default=Path("runs"), help="run directory: scripts, logs, results")
    p.add_argument("--dry-run", action="store_true", help="check and print; write and submit nothing")
    p.add_argument("train_args", nargs=argparse.REMAINDER,
                   help="after --: arguments for python -m gan3d train (data, batch, epochs, ...)")


def train_args(args: argparse.Namespace) -> tuple[str, ...]:
    extra = list(args.train_args)
    return tuple(extra[1:] if extra[:1] == ["--"] else extra)


def walltime(args: argparse.Namespace, max_walltime: str) -> str:
    if args.walltime:
        return args.walltime
    return DEFAULT_WALLTIME if seconds(DEFAULT_WALLTIME) <= seconds(max_walltime) else max_walltime


def _run(args: argparse.Namespace, submit: bool) -> int:
    site = load_site(args.site)
    threads = args.threads if args.threads is not None else default_threads(site, args.ranks_per_node)
    run_id = args.run_id or f"n{args.nodes}-r{args.ranks_per_node}-t{threads}"
    spec = RunSpec(run_id, args.nodes, args.ranks_per_node, threads, walltime(args, site.scheduler.max_walltime),
                   train_args(args), args.partition, args.account)
    checked = check_run(site, spec)
    pair = None
    if args.image:
        pair = read_pair_file(pair_file_for(args.image), site)
    console = Console(stderr=True)
    for warning in checked.warnings + (pair.warnings if pair else []):
        console.print(f"[yellow]warning[/yellow]: {warning}")
    if args.dry_run:
        sys.stdout.write(render(site, checked, RunFiles(args.dir.absolute(), run_id), pair, args.python))
        if not quiet():
            console.print("dry run: nothing written" + (", nothing submitted" if submit else ""))
        return 0
    with locked(args.dir.absolute()):
        _refuse_a_second_job(RunFiles(args.dir.absolute(), run_id))
        files = write_run(site, checked, args.dir, pair, args.python)
        if not (submit and quiet()):  # with -q a submission's result is the job id alone
            console.print(f"wrote {files.script}")
        if submit:
            job = sbatch(files.script)
            record_job(files.run_dir, run_id, job)
            if not quiet():
                console.print(f"submitted job {job}: log {files.log(job)}, result {files.result}")
            print(job)
    return 0


def _refuse_a_second_job(files: RunFiles) -> None:
    """A run id names one job's script, site copy and result: a queued job would read the next one's."""
    jobs = all_jobs(read_jobs(files.run_dir), files.run_id)
    active = [j for j, state in job_states(jobs).items() if is_active(state)]
    if active or files.result.exists():
        what = f"job {active[-1]} still queued or running" if active else f"a result ({files.result})"
        raise KitError(f"run {files.run_id} in {files.run_dir} already has {what}; fix: another --run-id or "
                       "--dir (sweeps: kit scale submit --resubmit)")


def register(sub: argparse._SubParsersAction) -> None:
    group = sub.add_parser("slurm", help="batch scripts for one training run")
    leaves = group.add_subparsers(dest="slurm_cmd", required=True, metavar="SUBCOMMAND")
    for name, submit, text in (("render", False, "write the run's batch script (and the site config it reads)"),
                               ("submit", True, "render, then sbatch it and record the job in DIR/jobs.yaml")):
        p = leaves.add_parser(name, help=text, description=text)
        p.add_argument("--nodes", type=int, default=1)
        p.add_argument("--ranks-per-node", type=int, default=1)
        p.add_argument("--threads", type=int, help="per rank (default: the node's cores shared evenly)")
        p.add_argument("--run-id", help="name of the run (default nN-rR-tT)")
        add_run_args(p)
        p.set_defaults(func=lambda a, s=submit: _run(a, s))

