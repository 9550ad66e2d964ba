"""`kit study plan|run|status|report|cancel`: hyperparameter studies on the kit's runs
(kit.study).
"""

from __future__ import annotations

import argparse
from contextlib import nullcontext
from pathlib import Path

from rich.table import Table

from kit.commands.common import (
    add_dry_run,
    add_group,
    add_made_dir,
    add_read_dir,
    add_site,
    new_spelling,
    number,
)
from kit.errors import KitError
from kit.excerpt import plain_console, printable
from kit.jsonout import add_json, emit
from kit.verbosity import quiet

STATUS_SCHEMA = "kit-study-status/1"


def _plan(args: argparse.Namespace) -> int:
    from kit.study.studydir import plan_study

    args.dir = new_spelling(
        args, "dir", old="kit study plan SPEC DIR", new="kit study plan SPEC --dir DIR"
    )
    if args.dir is None:
        raise KitError("kit study plan: no study directory", fix="give --dir DIR (a new directory)")
    header = plan_study(
        args.spec,
        args.site,
        args.dir,
        parallel=args.parallel,
        pilot=args.pilot,
        walltime=args.walltime,
        image=args.image,
        python=args.python,
        dry_run=args.dry_run,
    )
    how = (
        f"a pilot job of {args.pilot} node(s)"
        if args.pilot
        else ("Slurm jobs" if header["walltime"] else "this machine")
    )
    say = (
        f"study at {printable(header['site_name'])}: "
        f"objective {printable(header['objective'])} ({header['direction']}), "
        f"strategy {printable(header['strategy'])}, {args.parallel} in flight through {how}"
    )
    if not quiet():
        plain_console().print(say)
    if args.dry_run:
        print(f"dry run: {args.dir} not written")
    else:
        print(f"wrote {args.dir}/study.yaml and ledger.jsonl; next: kit study run {args.dir}")
    return 0


def _run(args: argparse.Namespace) -> int:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from kit.study.run import run_study

    bar = (
        nullcontext()
        if quiet()
        else Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[detail]}"),
        )
    )
    with bar as progress:
        task = progress.add_task("evaluations", total=None, detail="") if progress else None

        def show(p) -> None:
            if progress and task is not None:  # both or neither
                best = "-" if p.best is None else f"{p.best:.6g} ({p.best_eval})"
                progress.update(
                    task,
                    completed=p.done,
                    total=p.budget,
                    detail=f"{p.in_flight} in flight, {p.failed} failed, best {best}",
                )

        final = run_study(args.dir, args.poll, show)
    best = "none" if final.best is None else f"{final.best:.6g} ({final.best_eval})"
    print(
        f"{final.done} evaluation(s) done, {final.failed} failed; best {best}; "
        f"next: kit study report {args.dir}"
    )
    return 0


def status_document(study_dir: Path) -> dict:
    from kit.study.run import best_of
    from kit.study.studydir import open_study

    _, _, _, led = open_study(study_dir)
    direction = led.header.get("direction", "minimize")
    eid, value = best_of(led, direction)
    evals = [
        {
            "eval": e.eval_id,
            "state": e.state,
            "objective": e.objective,
            "config": e.config,
            "jobs": [s.get("job") for s in e.submissions if s.get("job")],
            "error": e.error,
        }
        for e in led.evaluations.values()
    ]
    return {
        "dir": str(study_dir.absolute()),
        "objective": led.header.get("objective"),
        "direction": direction,
        "done": len(led.done()),
        "failed": sum(e.state == "failed" for e in led.done()),
        "in_flight": len(led.in_flight()),
        "best": {"eval": eid, "objective": value} if eid else None,
        "evaluations": evals,
    }


def _status(args: argparse.Namespace) -> int:
    doc = status_document(args.dir)
    if args.json:
        emit(STATUS_SCHEMA, doc)
        return 0
    table = Table(title=f"study {args.dir} ({printable(doc['objective'])}, {doc['direction']})")
    for col in ("eval", "state", "objective", "jobs", "config"):
        table.add_column(col, overflow="fold")
    for e in doc["evaluations"]:
        table.add_row(
            e["eval"],
            e["state"],
            "-" if e["objective"] is None else f"{e['objective']:.6g}",
            " ".join(e["jobs"]) or "-",
            printable(
                ", ".join(
                    f"{printable(k, 60)}={printable(v, 100)}" for k, v in e["config"].items()
                ),
                1000,
            ),
        )
    console = plain_console()  # the ledger's names and values print as text, never as markup
    console.print(table)
    best = doc["best"]
    console.print(
        f"{doc['done']} done ({doc['failed']} failed), {doc['in_flight']} in flight; best "
        + (f"{best['objective']:.6g} ({best['eval']})" if best else "none yet")
    )
    return 0


def _report(args: argparse.Namespace) -> int:
    from kit.study.report import write_report

    for path in write_report(args.dir):
        print(path)
    return 0


def _cancel(args: argparse.Namespace) -> int:
    from kit.study.run import cancel_study

    stopped = cancel_study(args.dir, args.dry_run)
    verb = "would cancel" if args.dry_run else "cancelled"
    print(
        f"{verb} {', '.join(stopped)}; kit study run {args.dir} starts them again"
        if stopped
        else "no evaluation is in flight"
    )
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    leaves = add_group(sub, "study", "hyperparameter studies on the kit's runs")
    _add_plan(leaves)
    _add_run(leaves)
    _add_status(leaves)
    _add_report(leaves)
    _add_cancel(leaves)


def _add_plan(leaves: argparse._SubParsersAction) -> None:
    p = leaves.add_parser(
        "plan",
        help="check a study spec against a site and write DIR",
        description="Writes DIR/study.yaml (the spec) and an empty DIR/ledger.jsonl; "
        "DIR must be new or empty. Nothing runs.",
    )
    p.add_argument(
        "spec",
        type=Path,
        metavar="SPEC",
        help="the study YAML (parameters, fixed, objective, budget, strategy)",
    )
    p.add_argument("old_dir", type=Path, nargs="?", help=argparse.SUPPRESS)  # SPEC DIR: old
    add_made_dir(p, "the study directory to make (new or empty); required")
    add_site(p, more="where the evaluations run")
    p.add_argument(
        "--parallel",
        type=number(1),
        default=2,
        metavar="K",
        help="evaluations in flight",
    )
    p.add_argument(
        "--pilot",
        type=number(1),
        metavar="N",
        help="Slurm sites: one job of N nodes runs the evaluations back to back",
    )
    p.add_argument(
        "--walltime",
        metavar="HH:MM:SS",
        help="Slurm sites: per evaluation job (or of the pilot job)",
    )
    p.add_argument(
        "--image",
        help="Slurm sites: the image (ch-run with the host MPI); default the site's Python",
    )
    p.add_argument("--python", help="Slurm sites: the Python that runs gan3d (default python3)")
    add_dry_run(p, "check; write nothing")
    p.set_defaults(func=_plan)


def _add_run(leaves: argparse._SubParsersAction) -> None:
    p = leaves.add_parser("run", help="run the study to its budget (resumes where it stopped)")
    add_read_dir(p, "the study directory (kit study plan made it)")
    p.add_argument(
        "--poll",
        type=number(0.05, float, 3600),
        default=5.0,
        help="seconds between checks",
    )
    p.set_defaults(func=_run)


def _add_status(leaves: argparse._SubParsersAction) -> None:
    p = leaves.add_parser("status", help="every evaluation's state and objective; the best so far")
    add_read_dir(p, "the study directory")
    add_json(p, STATUS_SCHEMA)
    p.set_defaults(func=_status)


def _add_report(leaves: argparse._SubParsersAction) -> None:
    p = leaves.add_parser("report", help="DIR/report: report.md, report.csv and plots")
    add_read_dir(p, "the study directory")
    p.set_defaults(func=_report)


def _add_cancel(leaves: argparse._SubParsersAction) -> None:
    p = leaves.add_parser(
        "cancel", help="stop the evaluations in flight (kit study run starts them again)"
    )
    add_read_dir(p, "the study directory")
    add_dry_run(p, "say which; stop nothing")
    p.set_defaults(func=_cancel)
