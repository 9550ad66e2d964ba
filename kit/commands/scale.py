"""`kit scale tune|plan|submit|collect|cancel|report|predict`: a scaling sweep from the best layout
to the paper's tables and a forecast of node-hours.
"""

from __future__ import annotations

import argparse
import sys
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from gan3d.peak import MAX_SECONDS
from kit.commands.common import (
    Words,
    add_dry_run,
    add_group,
    add_made_dir,
    add_read_dir,
    add_run_args,
    add_site,
    add_train_args,
    comma_words,
    number,
    numbers,
    train_args,
)
from kit.errors import KitError
from kit.excerpt import plain_console, printable, printable_lines, printable_text
from kit.jsonout import add_json, emit
from kit.mpi.pair_reader import pair_file_for
from kit.scale import sweep_jobs
from kit.scale.paper import OVERHEAD_TABLES, TABLES
from kit.scale.plan import make_plan, write_plan
from kit.scale.tune import ITEX, PRECISIONS
from kit.site import load_site
from kit.slurm.spec import walltime
from kit.verbosity import quiet

if TYPE_CHECKING:
    from kit.slurm.submit import Submission

COUNTS = numbers(1, int, maximum=10**6)  # node counts, ranks per node, threads per rank
EPOCH_TABLES = [name for name, table in TABLES.items() if table.seconds_per_epoch]


def _table(text: str) -> str:
    """A paper table as --reference takes it: table4, or just 4."""
    key = text.strip().lower()
    return f"table{key}" if key.isdigit() else key


def _plan(args: argparse.Namespace) -> int:
    site = load_site(args.site)
    ranks, threads = args.ranks_per_node or [1], args.threads
    nodes, repeats, extra = (
        args.nodes,
        1 if args.repeats is None else args.repeats,
        train_args(args),
    )
    added: list[str] = []
    if args.calibrate:
        from kit.scale.plan import CALIBRATION_REPEATS, calibration_nodes, calibration_train_args

        if nodes and len(nodes) > 1:
            raise KitError(
                f"--calibrate --nodes {','.join(map(str, nodes))}: the calibration adds 2n0 and 8n0",
                fix="give the smallest count n0 alone",
            )
        nodes = calibration_nodes(nodes[0] if nodes else 1, site.scheduler.max_nodes)
        repeats = CALIBRATION_REPEATS if args.repeats is None else args.repeats
        extra, added = calibration_train_args(extra)
    elif not nodes:
        raise KitError(
            "kit scale plan: --nodes is required (or --calibrate)", fix="e.g. --nodes 1,2,4,8"
        )
    if args.layout == "best" or args.tune:
        from kit.scale.tune import best_layout

        tune_file, (rpn, tpr) = best_layout(
            site,
            args.dir,
            tune_file=args.tune,
            layout_given=bool(args.ranks_per_node or args.threads),
            asked=args.layout == "best",
        )
        ranks, threads = [rpn], [tpr]
        plain_console().print(
            f"layout from {tune_file}: {rpn} rank(s) per node x {tpr} thread(s) per rank"
        )
    plan = make_plan(
        site,
        nodes,
        ranks,
        threads=threads,
        walltime=walltime(args.walltime, site.scheduler.max_walltime),
        image=None if args.no_container else args.image,
        python=args.python,
        train_args=extra,
        partition=args.partition,
        account=args.account,
        repeats=repeats,
        validate=args.validate,
    )
    table = Table(title=f"sweep at {printable(site.name)}: {len(plan.runs)} run(s)")
    for col in ("run", "nodes", "ranks/node", "threads/rank", "ranks"):
        table.add_column(col)
    for r in plan.runs:
        table.add_row(
            r.run_id, str(r.nodes), str(r.ranks_per_node), str(r.threads_per_rank), str(r.ranks)
        )
    console = plain_console()  # paths and values print as text, never as markup
    console.print(table)
    if plan.validate:
        from kit.slurm.script import validation_data

        console.print(
            f"physics: each job then runs gan3d validate on its final checkpoint against "
            f"{printable(validation_data(plan.train_args), 400)}"
        )
    for refused in plan.refused:
        console.print(
            Text.assemble(
                ("left out", "yellow"),
                f" {refused['nodes']} x {refused['ranks_per_node']} x {refused['threads_per_rank']}: "
                f"{printable(refused['reason'], 400)}",
            )
        )
    if args.calibrate:
        from kit.scale.plan import node_hours_bound

        console.print(
            "calibration for kit scale predict: "
            f"{', '.join(map(str, sorted({r.nodes for r in plan.runs})))} node(s) x {repeats} "
            f"repeats{' (added: ' + ', '.join(added) + ')' if added else ''}; "
            f"at most {node_hours_bound(plan):.3g} node-hours ({len(plan.runs)} jobs, "
            f"each its nodes for the walltime {plan.walltime}; a job that ends early is charged less)"
        )
    if args.dry_run:
        console.print(f"dry run: {args.dir / 'plan.yaml'} not written")
        return 0
    then = f"; then kit scale predict {args.dir}" if args.calibrate else ""
    console.print(f"wrote {write_plan(plan, args.dir)}; next: kit scale submit {args.dir}{then}")
    return 0


def _tune(args: argparse.Namespace) -> int:
    from kit.scale import tune

    site = tune.site_of(args.site)
    extra = train_args(args)
    tune.check_train_args(extra)
    layouts = tune.candidate_layouts(
        site,
        tune.parse_layouts(args.layouts) if args.layouts else None,
        precisions=tuple(args.precision),
        itex=tuple(args.itex),
    )
    slurm = tune.through_slurm(site, args.nodes, bool(args.image or args.no_container))
    console = plain_console()  # the runs' problems and CPU names print as text
    how = f"Slurm jobs of {args.nodes} node(s)" if slurm else "one after another on this machine"
    console.print(
        f"tuning {len(layouts)} layout(s) on site {printable(site.name)}, {how}: "
        + ", ".join(layout.name for layout in layouts)
    )
    tune.check_outputs(args.dir)
    if args.dry_run:
        console.print(f"dry run: nothing run, {args.dir / tune.TUNE_NAME} not written")
        return 0
    with nullcontext() if quiet() else console.status("starting") as status:
        if slurm:
            pair = str(pair_file_for(args.image).absolute()) if args.image else None
            measured = tune.run_slurm(
                site,
                layouts,
                args.dir,
                train_args=extra,
                steps=args.steps,
                peak_seconds=args.peak_seconds,
                timeout=args.timeout,
                walltime=walltime(args.walltime, site.scheduler.max_walltime),
                nodes=args.nodes,
                pair=pair,
                python=args.python,
                itex_python=args.itex_python,
                poll_seconds=args.poll,
                on_poll=None
                if status is None
                else lambda st: status.update(
                    "waiting for Slurm: " + ", ".join(f"{s.run_id} {s.state}" for s in st)
                ),
            )
        else:
            measured = tune.run_local(
                site,
                layouts,
                args.dir,
                train_args=extra,
                steps=args.steps,
                peak_seconds=args.peak_seconds,
                timeout=args.timeout,
                itex_python=args.itex_python or tune.sibling_itex_python(),
                on_start=None
                if status is None
                else lambda layout: status.update(
                    f"training layout {layout.name} ({layouts.index(layout) + 1} of {len(layouts)})"
                ),
            )
    tune_file, png = tune.write_tune(site, args.nodes, measured, out_dir=args.dir)
    top = tune.best(measured)
    table = Table(title=f"layouts of a {printable(site.name)} node (best: {top.layout.name})")
    for col in ("layout", "showers/s", "peak memory/rank", "% of peak (denominator)", "problem"):
        table.add_column(col, overflow="fold")
    for m in measured:
        table.add_row(
            ("* " if m is top else "") + m.layout.name,
            "-" if m.showers_per_second is None else f"{m.showers_per_second:.3g}",
            "-"
            if m.peak_rss_bytes_per_rank is None
            else f"{m.peak_rss_bytes_per_rank / 2**30:.2f} GiB",
            "-"
            if m.percent_of_peak is None
            else f"{m.percent_of_peak:.1f}% of {printable(m.percent_of_peak_denominator)}",
            printable(m.problem or "", 1000),
        )
    console.print(table)
    if top.cpu:
        console.print(f"ran on: {printable(top.cpu)}")
    console.print(f"layer forms of {top.layout.name}: {printable(tune.forms_line(top), 1000)}")
    itex = " (the best ran with ITEX: give the plan its Python and `-- ... --itex on`)"
    console.print(
        f"wrote {tune_file} and {png}; next: kit scale plan --layout best --tune {tune_file} ..."
        + (itex if top.layout.itex == "on" else "")
    )
    return 0


def _submit_line(console: Console, s: Submission) -> None:
    job = f"job {s.job}" if s.job else "-"
    console.print(
        f"{printable(s.run_id):<16} {printable(job):<12} {printable(s.note, 1000)}  {s.script}",
        soft_wrap=True,  # one line per run, its path whole
    )


def _submit(args: argparse.Namespace) -> int:
    console = plain_console()  # sbatch's words print as text, never as markup
    shown: set[str] = set()  # runs that trained here are printed as each ends

    def ended(s: Submission) -> None:
        _submit_line(console, s)
        shown.add(s.run_id)

    with nullcontext() if quiet() or args.dry_run else console.status("starting") as status:
        done = sweep_jobs.submit(
            args.dir,
            dry_run=args.dry_run,
            only=args.only,
            resubmit=args.resubmit,
            on_start=None
            if status is None
            else lambda run: status.update(f"training {run.run_id} on this machine"),
            on_done=ended,
        )
    for s in done:
        if s.run_id not in shown:
            _submit_line(console, s)
    if any(s.job and s.job.startswith("local-") for s in done):
        console.print(f"next: kit scale collect {args.dir}")
    return 1 if any(s.failed or s.note.startswith("not submitted") for s in done) else 0


def _status_table(status: list[sweep_jobs.RunStatus]) -> Table:
    table = Table(title="runs")
    validated = any(s.physics for s in status)
    for col in ("run", "job", "state", "result", *(["physics"] if validated else [])):
        table.add_column(col, overflow="fold")
    for s in status:  # the plan's run ids and the scheduler's states: as text, never as markup
        table.add_row(
            printable_text(s.run_id),
            printable_text(s.job or "-"),
            printable_text(s.state),
            printable_text(s.result, 400)
            if s.result
            else Text("missing", style="red")
            if s.problem
            else Text("-"),
            *(
                [
                    Text("failed", style="red")
                    if s.physics == "failed"
                    else printable_text(s.physics or "-")
                ]
                if validated
                else []
            ),
        )
    return table


COLLECT_SCHEMA = "kit-scale-collect/1"
# kit.scale.predict's, named here so that --help imports no numpy
PREDICT_SCHEMA = "kit-scale-predict/2"


def _collect(args: argparse.Namespace) -> int:
    if args.json:  # no live table: the document is all that goes to stdout
        status = (
            sweep_jobs.wait(args.dir, poll_seconds=args.poll, timeout=args.timeout)
            if args.wait
            else sweep_jobs.collect(args.dir)
        )
        emit(COLLECT_SCHEMA, sweep_jobs.collect_document(args.dir, status))
        return 1 if any(s.problem for s in status) else 0
    console = plain_console()  # a job's log is printed escaped, never as markup
    if args.wait and not quiet():  # the live table is progress: -q prints only the final one
        with Live(console=console, auto_refresh=False) as live:
            status = sweep_jobs.wait(
                args.dir,
                poll_seconds=args.poll,
                timeout=args.timeout,
                on_poll=lambda st: live.update(_status_table(st), refresh=True),
            )
    else:
        status = (
            sweep_jobs.wait(args.dir, poll_seconds=args.poll, timeout=args.timeout)
            if args.wait
            else sweep_jobs.collect(args.dir)
        )
        console.print(_status_table(status))
    for s in status:
        if s.problem:
            console.print(
                Text.assemble(
                    printable_text(s.run_id, style="red"),
                    f" (job {printable(s.job)}, {printable(s.state)}) has no result; "
                    + ("its log ends:" if s.problem_in_log else "its result file is refused:"),
                )
            )
            console.print(printable_lines(s.problem), soft_wrap=True)
        if s.physics_problem:
            console.print(
                Text.assemble(
                    printable_text(s.run_id, style="yellow"),
                    f" (job {printable(s.job)}) has a result but its physics validation failed; "
                    "its validation log ends:",
                )
            )
            console.print(printable_lines(s.physics_problem), soft_wrap=True)
    done = sum(s.done for s in status)
    console.print(f"{done} of {len(status)} run(s) have results")
    return 1 if any(s.problem for s in status) else 0


def _cancel(args: argparse.Namespace) -> int:
    from kit.scale.plan import load_plan

    site = load_plan(args.dir).load_site()
    if sweep_jobs.runs_here(site):
        print(
            f"site {printable(site.name)} has no scheduler (scheduler.type local): nothing is queued; "
            "Ctrl-C stops a running kit scale submit"
        )
        return 0
    active = sweep_jobs.cancel(args.dir, only=args.only, dry_run=args.dry_run)
    verb = "would cancel" if args.dry_run else "cancelled"
    for run, job in active:
        print(f"{verb} {printable(run)} (job {printable(job)})")
    if not active:
        print("no run of the plan is queued or running")
    return 0


def _report(args: argparse.Namespace) -> int:
    from kit.scale.report import report_sweep

    failed: list[str] = []
    try:
        written = report_sweep(
            args.dir, args.results, out=args.out, reference=args.reference, failed=failed
        )
    finally:  # named even when nothing else is left to report
        for problem in failed:
            print(f"left out (failed run): {printable(problem, 1000)}", file=sys.stderr)
    for path in written:
        print(path)
    return 0


def _predict(args: argparse.Namespace) -> int:
    from kit.scale import predict as pr
    from kit.scale.plots import prediction_plot

    if args.reference:
        if args.dir or args.results or args.nodes:
            raise KitError(
                "--reference backtests a paper table on its own, at the rows it did not fit",
                fix="leave out DIR, --results and --nodes",
            )
        backtest = pr.backtest(args.reference, args.calibrate_on, args.epochs)
        predictions, skipped = [backtest.prediction], list[KitError]()
        document: dict[str, object] = {"backtest": pr.backtest_document(backtest)}
        unseen = {
            backtest.prediction.calibration.label: [(r.nodes, r.measured) for r in backtest.rows]
        }
    else:
        from kit.scale.runs import load_results

        failed: list[str] = []
        paths = (sweep_jobs.results(args.dir, failed) if args.dir else []) + list(args.results)
        for problem in failed:
            print(f"left out (failed run): {problem}", file=sys.stderr)
        if not paths:
            raise KitError(
                "no results to predict from: "
                f"{args.dir or 'no sweep dir'} has none yet and no --results JSON was named",
                fix="kit scale collect DIR shows why; or name --results files",
            )
        predictions, skipped = pr.predict_runs(load_results(paths), args.nodes, args.epochs)
        document = {
            "series": [pr.prediction_document(p) for p in predictions],
            "left_out": [s.line() for s in skipped],
            "epochs": args.epochs,
        }
        unseen = None
    written = (
        pr.write_outputs(args.out, {**document}, prediction_plot(predictions, unseen))
        if args.out
        else []
    )
    if args.json:
        emit(PREDICT_SCHEMA, {**document, "written": [str(p) for p in written]})
        return 0
    from kit.scale.predict_view import show

    show(
        predictions,
        skipped,
        epochs=args.epochs,
        backtest=backtest if args.reference else None,
        calibrate_on=args.calibrate_on,
    )
    for path in written:
        print(path)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    leaves = add_group(sub, "scale", "scaling studies: tune a node, sweep node counts, forecast")
    _add_plan(leaves)
    _add_tune(leaves)
    _add_submit(leaves)
    _add_collect(leaves)
    _add_cancel(leaves)
    _add_report(leaves)
    _add_predict(leaves)


def _add_plan(leaves: argparse._SubParsersAction) -> None:
    p = leaves.add_parser(
        "plan",
        help="expand nodes x ranks per node x threads into DIR/plan.yaml",
        description="Every combination the site can hold becomes a run; "
        "the others are listed with the reason. Nothing is submitted.",
    )
    p.add_argument(
        "--nodes",
        type=COUNTS,
        metavar="N[,N...]",
        help="node counts, e.g. 1,2,4,8 (with --calibrate: the smallest count n0, default 1)",
    )
    p.add_argument(
        "--ranks-per-node", type=COUNTS, metavar="R[,R...]", help="e.g. 1,2,4 (default 1)"
    )
    p.add_argument(
        "--threads",
        type=COUNTS,
        metavar="T[,T...]",
        help="per rank, e.g. 12,24 (default: cores shared evenly)",
    )
    p.add_argument(
        "--repeats",
        type=number(1, int, 100),
        metavar="N",
        help="run each combination N times (RUN-x1..xN); "
        "the report shows median and min-max (default 1; 3 with --calibrate)",
    )
    p.add_argument(
        "--calibrate",
        action="store_true",
        help="the cheapest sweep kit scale predict needs: n0, 2n0, "
        "8n0 nodes x 3 repeats of short epochs (--steps-per-epoch 20, --epochs 2 unless given), "
        "with what it can cost in node-hours",
    )
    p.add_argument(
        "--validate",
        action="store_true",
        help="each job then runs gan3d validate on its final checkpoint (one rank, same container) "
        "against the run's --validation-data, else --data; the score goes into its results",
    )
    p.add_argument(
        "--layout", choices=["best"], help="best: ranks per node x threads from kit scale tune"
    )
    p.add_argument(
        "--tune",
        type=Path,
        metavar="FILE",
        help="the tune file for --layout best (default DIR/tune.yaml)",
    )
    add_run_args(p)
    p.set_defaults(func=_plan)


def _add_tune(leaves: argparse._SubParsersAction) -> None:
    p = leaves.add_parser(
        "tune",
        help="measure each ranks x threads layout of a node; write the best to DIR/tune.yaml",
        description="Short measured trainings, one per layout (through Slurm where the site has it, "
        "else on this machine): showers/s, memory and % of the measured peak of each, a table, "
        "DIR/tune.png, and DIR/tune.yaml for kit scale plan --layout best.",
    )
    p.add_argument("--nodes", type=number(1), default=1, metavar="N", help="nodes per tuning run")
    p.add_argument(
        "--precision",
        type=comma_words,
        choices=Words(PRECISIONS),
        default=PRECISIONS[:1],
        metavar=f"{{{','.join(PRECISIONS)}}}[,...]",
        help="what gan3d train computes in: a comma list",
    )
    p.add_argument(
        "--layouts",
        help="RANKSxTHREADS list, e.g. 1x48,4x12 (default: every split of the node's cores)",
    )
    p.add_argument(
        "--itex",
        type=comma_words,
        choices=Words(ITEX),
        default=ITEX[:1],
        metavar=f"{{{','.join(ITEX)}}}[,...]",
        help="Intel Extension for TensorFlow as one more dimension, "
        "a comma list (an on layout where ITEX does not load is reported refused, with ITEX's reason)",
    )
    p.add_argument(
        "--itex-python",
        help="the ITEX stack's Python for --itex on layouts (default on this machine: "
        ".venv-itex/bin/python beside the running venv, where there is one; on Slurm: --python)",
    )
    p.add_argument(
        "--steps",
        type=number(2),
        default=6,
        help="optimizer steps per layout; the first is not timed",
    )
    p.add_argument(
        "--peak-seconds",
        type=number(0.05, float, MAX_SECONDS),
        default=1.0,
        help=f"seconds of dense-matmul peak measurement per precision (at most {MAX_SECONDS:g}: "
        "gan3d train's bound)",
    )
    p.add_argument(
        "--timeout",
        type=number(1, float),
        default=1800.0,
        help="seconds per layout (local) or for all jobs (Slurm)",
    )
    p.add_argument(
        "--poll", type=number(0.1, float), default=5.0, help="seconds between Slurm checks"
    )
    add_site(p)
    where = p.add_mutually_exclusive_group()
    where.add_argument(
        "--image", help="Slurm sites: the image as the site sees it (ch-run with the host MPI)"
    )
    where.add_argument(
        "--no-container", action="store_true", help="Slurm sites: the site's own Python"
    )
    p.add_argument("--walltime", metavar="HH:MM:SS", help="per job on a Slurm site")
    p.add_argument("--python", default="python3", help="Slurm sites: the Python that runs gan3d")
    add_made_dir(p, "where runs, tune.yaml and tune.png go", Path("tune"))
    add_dry_run(p, "list the layouts; run nothing")
    add_train_args(
        p,
        "after --: "
        "data and model arguments for python -m gan3d train (e.g. --synthetic 256 --preset tiny)",
    )
    p.set_defaults(func=_tune)


def _add_submit(leaves: argparse._SubParsersAction) -> None:
    p = leaves.add_parser(
        "submit",
        help="sbatch the plan's runs (skips runs done or still queued)",
        description="On a Slurm site each run becomes a batch job. "
        "On a site without a scheduler (scheduler.type local) the runs train here, one after another, "
        "each bounded by the walltime; Ctrl-C stops the one running and keeps the results of those done.",
    )
    add_read_dir(p, "the sweep directory (kit scale plan wrote its plan.yaml)")
    p.add_argument("--only", nargs="+", metavar="RUN", help="just these runs")
    p.add_argument(
        "--resubmit", action="store_true", help="also runs that have a result or a queued job"
    )
    add_dry_run(p, "check and list; write and submit nothing")
    p.set_defaults(func=_submit)


def _add_collect(leaves: argparse._SubParsersAction) -> None:
    p = leaves.add_parser("collect", help="the state of every run; the log of a run that failed")
    add_read_dir(p, "the sweep directory")
    p.add_argument("--wait", action="store_true", help="until no run is queued or running")
    p.add_argument(
        "--poll",
        type=number(0.1, float, 3600),
        default=10.0,
        help="seconds between checks with --wait",
    )
    p.add_argument(
        "--timeout",
        type=number(0, float, 366 * 86400),
        help="give up waiting after this many seconds",
    )
    add_json(p, COLLECT_SCHEMA)
    p.set_defaults(func=_collect)


def _add_cancel(leaves: argparse._SubParsersAction) -> None:
    p = leaves.add_parser("cancel", help="scancel the plan's queued and running jobs")
    add_read_dir(p, "the sweep directory")
    p.add_argument("--only", nargs="+", metavar="RUN", help="just these runs")
    add_dry_run(p, "say which jobs; cancel nothing")
    p.set_defaults(func=_cancel)


def _add_report(leaves: argparse._SubParsersAction) -> None:
    p = leaves.add_parser(
        "report",
        extra="report",
        help="tables (md, csv) and plots (png) of a sweep, as in the paper",
    )
    add_read_dir(p, "the sweep directory", optional=True)
    p.add_argument(
        "--results",
        type=Path,
        nargs="+",
        default=[],
        metavar="JSON",
        help="further results files (other sweeps, other sites)",
    )
    p.add_argument("--out", type=Path, help="where to write (default DIR/report)")
    p.add_argument(
        "--reference",
        type=_table,
        choices=[*TABLES, *OVERHEAD_TABLES],
        metavar="TABLE",
        help=f"a table of the paper to compare with: {', '.join(TABLES)} (scaling, FLOP rate), "
        f"{', '.join(OVERHEAD_TABLES)} (container vs bare throughput, free memory)",
    )
    p.set_defaults(func=_report)


def _add_predict(leaves: argparse._SubParsersAction) -> None:
    p = leaves.add_parser(
        "predict",
        extra="report",
        help="forecast epoch time, efficiency and node-hours at N nodes from a few runs",
        description="Fits how the node-seconds per epoch grow with the ranks on each series of "
        "measured runs (two node counts or more; three tell the shapes apart) "
        "and forecasts the asked node counts with a band (kit docs predict). "
        "--reference backtests the model on a paper table instead.",
    )
    add_read_dir(p, "the sweep directory", optional=True)
    p.add_argument(
        "--results", type=Path, nargs="+", default=[], metavar="JSON", help="further results files"
    )
    p.add_argument(
        "--nodes",
        type=COUNTS,
        metavar="N[,N...]",
        help="node counts to forecast (default 4x, 16x, 64x the largest measured)",
    )
    p.add_argument(
        "--epochs", type=number(1, int, 10**6), help="planned epochs: adds their node-hours"
    )
    p.add_argument(
        "--out", type=Path, metavar="PLOTDIR", help="write predict.png and predict.json there"
    )
    p.add_argument(
        "--reference",
        type=_table,
        choices=EPOCH_TABLES,
        metavar="TABLE",
        help=f"backtest on a paper table instead: {', '.join(EPOCH_TABLES)}",
    )
    p.add_argument(
        "--calibrate-on",
        type=number(2, int, 100),
        default=3,
        metavar="K",
        help="with --reference: fit on the table's first K rows",
    )
    add_json(p, PREDICT_SCHEMA)
    p.set_defaults(func=_predict)
