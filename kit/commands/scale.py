"""`kit scale plan|submit|collect|cancel|report`: a scaling sweep from plan to the paper's tables."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console
from rich.live import Live
from rich.table import Table

from kit.commands.slurm import add_run_args, train_args, walltime
from kit.errors import KitError
from kit.jsonout import add_json_flag, emit
from kit.scale import campaign
from kit.scale.plan import make_plan, write_plan
from kit.site import load_site
from kit.verbosity import quiet


def _ints(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        values = []
    if not values:
        raise argparse.ArgumentTypeError(f"{text!r}: give comma-separated whole numbers, e.g. 1,2,4,8")
    return values


def _plan(args: argparse.Namespace) -> int:
    site = load_site(args.site)
    plan = make_plan(site, args.nodes, args.ranks_per_node, args.threads,
                     walltime(args, site.scheduler.max_walltime), None if args.no_container else args.image,
                     args.python, train_args(args), args.partition, args.account, args.repeats)
    table = Table(title=f"sweep at {site.name}: {len(plan.runs)} run(s)")
    for col in ("run", "nodes", "ranks/node", "threads/rank", "ranks"):
        table.add_column(col)
    for r in plan.runs:
        table.add_row(r.run_id, str(r.nodes), str(r.ranks_per_node), str(r.threads_per_rank), str(r.ranks))
    console = Console()
    console.print(table)
    for refused in plan.refused:
        console.print(f"[yellow]left out[/yellow] {refused['nodes']} x {refused['ranks_per_node']} x "
                      f"{refused['threads_per_rank']}: {refused['reason']}")
    if args.dry_run:
        console.print(f"dry run: {args.dir / 'plan.yaml'} not written")
        return 0
    console.print(f"wrote {write_plan(plan, args.dir)}; next: kit scale submit {args.dir}")
    return 0


def _submit(args: argparse.Namespace) -> int:
    console = Console()
    done = campaign.submit(args.dir, args.dry_run, args.only, args.resubmit)
    for s in done:
        job = f"job {s.job}" if s.job else "-"
        console.print(f"{s.run_id:<16} {job:<12} {s.note}  {s.script}", highlight=False)
    return 1 if any(s.note.startswith("not submitted") for s in done) else 0


def _status_table(status: list[campaign.RunStatus]) -> Table:
    table = Table(title="runs")
    for col in ("run", "job", "state", "result"):
        table.add_column(col, overflow="fold")
    for s in status:
        table.add_row(s.run_id, s.job or "-", s.state, str(s.result) if s.result else
                      ("[red]missing[/red]" if s.problem else "-"))
    return table


COLLECT_SCHEMA = "kit-scale-collect/1"


def _collect_document(sweep_dir: Path, status: list[campaign.RunStatus]) -> dict:
    runs = [{"run": s.run_id, "job": s.job, "state": s.state, "result": str(s.result) if s.result else None,
             "problem": s.problem or None} for s in status]
    return {"dir": str(sweep_dir.absolute()), "runs": runs, "done": sum(s.done for s in status),
            "total": len(status), "problems": sum(bool(s.problem) for s in status)}


def _collect(args: argparse.Namespace) -> int:
    if args.json:  # no live table: the document is all that goes to stdout
        status = (campaign.wait(args.dir, args.poll, args.timeout) if args.wait
                  else campaign.collect(args.dir))
        emit(COLLECT_SCHEMA, _collect_document(args.dir, status))
        return 1 if any(s.problem for s in status) else 0
    console = Console()
    if args.wait and not quiet():  # the live table is progress: -q prints only the final one
        with Live(console=console, auto_refresh=False) as live:
            status = campaign.wait(args.dir, args.poll, args.timeout,
                                   on_poll=lambda st: live.update(_status_table(st), refresh=True))
    else:
        status = (campaign.wait(args.dir, args.poll, args.timeout) if args.wait
                  else campaign.collect(args.dir))
        console.print(_status_table(status))
    for s in status:
        if s.problem:
            console.print(f"[red]{s.run_id}[/red] (job {s.job}, {s.state}) has no result; its log ends:")
            console.print(s.problem, markup=False, highlight=False, soft_wrap=True)
    done = sum(s.done for s in status)
    console.print(f"{done} of {len(status)} run(s) have results")
    return 1 if any(s.problem for s in status) else 0


def _cancel(args: argparse.Namespace) -> int:
    active = campaign.cancel(args.dir, args.only, args.dry_run)
    verb = "would cancel" if args.dry_run else "cancelled"
    for run, job in active:
        print(f"{verb} {run} (job {job})")
    if not active:
        print("no run of the plan is queued or running")
    return 0


def _report(args: argparse.Namespace) -> int:
    from kit.scale.report import load_results, write_report

    failed: list[str] = []
    paths = campaign.results(args.dir, failed) if args.dir else []
    for problem in failed:
        print(f"left out (failed run): {problem}", file=sys.stderr)
    paths += args.results
    if not paths:
        raise KitError(f"no results to report: {args.dir or 'no sweep dir'} has none yet "
                       "(kit scale collect shows why) and no RESULT.json was named")
    out = args.out or (args.dir / "report" if args.dir else Path("report"))
    title = f"scaling sweep {args.dir.absolute().name}" if args.dir else None
    for path in write_report(load_results(paths), out, reference=args.reference, title=title):
        print(path)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    group = sub.add_parser("scale", help="scaling sweeps: plan, submit, collect, report")
    leaves = group.add_subparsers(dest="scale_cmd", required=True, metavar="SUBCOMMAND")

    p = leaves.add_parser("plan", help="expand nodes x ranks per node x threads into DIR/plan.yaml",
                          description="Every combination the site can hold becomes a run; the others are "
                          "listed with the reason. Nothing is submitted.")
    p.add_argument("--nodes", type=_ints, required=True, help="e.g. 1,2,4,8")
    p.add_argument("--ranks-per-node", type=_ints, default=[1], help="e.g. 1,2,4 (default 1)")
    p.add_argument("--threads", type=_ints, help="per rank, e.g. 12,24 (default: cores shared evenly)")
    p.add_argument("--repeats", type=int, default=1, metavar="N",
                   help="run each combination N times (RUN-x1..xN); the report shows median and min-max")
    add_run_args(p)
    p.set_defaults(func=_plan)

    p = leaves.add_parser("submit", help="sbatch the plan's runs (skips runs done or still queued)")
    p.add_argument("dir", type=Path, help="the sweep directory (holds plan.yaml)")
    p.add_argument("--only", nargs="+", metavar="RUN", help="just these runs")
    p.add_argument("--resubmit", action="store_true", help="also runs that have a result or a queued job")
    p.add_argument("--dry-run", action="store_true", help="check and list; write and submit nothing")
    p.set_defaults(func=_submit)

    p = leaves.add_parser("collect", help="the state of every run; the log of a run that failed")
    p.add_argument("dir", type=Path)
    p.add_argument("--wait", action="store_true", help="until no run is queued or running")
    p.add_argument("--poll", type=float, default=10.0, help="seconds between checks with --wait")
    p.add_argument("--timeout", type=float, help="give up waiting after this many seconds")
    add_json_flag(p, COLLECT_SCHEMA)
    p.set_defaults(func=_collect)

    p = leaves.add_parser("cancel", help="scancel the plan's queued and running jobs")
    p.add_argument("dir", type=Path)
    p.add_argument("--only", nargs="+", metavar="RUN", help="just these runs")
    p.add_argument("--dry-run", action="store_true", help="say which jobs; cancel nothing")
    p.set_defaults(func=_cancel)

    p = leaves.add_parser("report", help="tables (md, csv) and plots (png) of a sweep, as in the paper")
    p.add_argument("dir", type=Path, nargs="?", help="the sweep directory")
    p.add_argument("--results", type=Path, nargs="+", default=[], metavar="JSON",
                   help="further results files (other sweeps, other sites)")
    p.add_argument("--out", type=Path, help="where to write (default DIR/report)")
    p.add_argument("--reference", help="a table of the paper to compare with: table1..table7 (scaling, "
                   "FLOP rate), table8|table9 (container vs bare throughput, free memory)")
    p.set_defaults(func=_report)
