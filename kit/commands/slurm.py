"""`kit slurm render|submit`: one training run as a batch script, checked against the site."""

from __future__ import annotations

import argparse
import sys

from rich.text import Text

from kit.commands.common import add_group, add_run_args, number, train_args
from kit.errors import KitError
from kit.excerpt import plain_console, printable
from kit.mpi.pair_reader import pair_file_for, read_pair_file
from kit.site import load_site
from kit.slurm import RunFiles, RunSpec, check_run, default_threads, render
from kit.slurm.spec import run_id, walltime
from kit.slurm.submit import submit_runs
from kit.verbosity import quiet


def _run(args: argparse.Namespace, submit: bool) -> int:
    site = load_site(args.site)
    threads = (
        args.threads if args.threads is not None else default_threads(site, args.ranks_per_node)
    )
    name = args.run_id or run_id(args.nodes, args.ranks_per_node, threads)
    spec = RunSpec(
        run_id=name,
        nodes=args.nodes,
        ranks_per_node=args.ranks_per_node,
        threads_per_rank=threads,
        walltime=walltime(args.walltime, site.scheduler.max_walltime),
        train_args=train_args(args),
        partition=args.partition,
        account=args.account,
    )
    checked = check_run(site, spec)
    pair = read_pair_file(pair_file_for(args.image), site) if args.image else None
    console = plain_console(stderr=True)
    for warning in checked.warnings + (pair.warnings if pair else []):
        console.print(Text.assemble(("warning", "yellow"), f": {printable(warning, 400)}"))
    if args.dry_run:
        sys.stdout.write(
            render(
                site, checked, RunFiles(args.dir.absolute(), name), pair=pair, python=args.python
            )
        )
        if not quiet():
            console.print("dry run: nothing written" + (", nothing submitted" if submit else ""))
        return 0
    [done] = submit_runs(
        site,
        [checked],
        args.dir,
        pair=pair,
        python=args.python,
        resubmit=args.resubmit,
        queue=submit,
    )
    if done.held_back:
        raise KitError(
            f"run {name} in {args.dir.absolute()}: {done.note}", fix="another --run-id or --dir"
        )
    if submit and done.job is None:  # sbatch refused it
        raise KitError(f"run {name}: {done.note}", fix="clear what sbatch names, then submit again")
    files = RunFiles(args.dir.absolute(), name)
    if not (submit and quiet()):  # with -q a submission's result is the job id alone
        console.print(f"wrote {files.script}")
    if submit and done.job is not None:  # None: refused above
        if not quiet():
            console.print(
                f"submitted job {done.job}: log {files.log(done.job)}, result {files.result}"
            )
        print(done.job)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    leaves = add_group(sub, "slurm", "one training run as a checked Slurm batch script")
    for name, submit, text in (
        ("render", False, "write the run's batch script (and the site config it reads)"),
        ("submit", True, "render, then sbatch it and record the job in DIR/jobs.yaml"),
    ):
        p = leaves.add_parser(name, help=text, description=text)
        p.add_argument(
            "--nodes", type=number(1, int, 10**6), default=1, metavar="N", help="nodes of the job"
        )
        p.add_argument(
            "--ranks-per-node",
            type=number(1, int, 10**6),
            default=1,
            metavar="R",
            help="MPI ranks on each node",
        )
        p.add_argument(
            "--threads",
            type=number(1, int, 10**6),
            metavar="T",
            help="per rank (default: the node's cores shared evenly)",
        )
        p.add_argument("--run-id", help="name of the run (default nN-rR-tT)")
        if submit:
            p.add_argument(
                "--resubmit",
                action="store_true",
                help="submit a run that has a result again (its result is moved aside); "
                "never beside a job of the same run still queued or running",
            )
        else:
            p.set_defaults(resubmit=False)
        add_run_args(p)
        p.set_defaults(func=lambda a, s=submit: _run(a, s))
