"""`kit mpi pair|check`: pair an image's MPI with a site's host MPI, and prove it."""

from __future__ import annotations

import argparse

import yaml
from rich.table import Table
from rich.text import Text

import kit.mpi as mpi  # its names import on first use: the ELF reader only when a command runs
from kit.commands.common import add_dry_run, add_group, add_mpi_mode, add_site, number
from kit.excerpt import plain_console, printable, printable_lines
from kit.image_names import pair_path
from kit.jsonout import add_json, emit
from kit.verbosity import quiet, verbose

PAIR_SCHEMA = "kit-mpi-pair/1"


def _pair_json(args: argparse.Namespace) -> int:
    """The same work as the text form; the document is printed only once all of it is done."""
    pair = mpi.make_pair(args.site, args.image, mode=args.mpi_mode)
    if not args.dry_run:
        mpi.pair_target(pair, args.out)  # refused before --prepare changes the image
    made = None if args.dry_run or not args.prepare else mpi.prepare_image_dir(pair, args.image)
    written = None if args.dry_run else str(mpi.write_pair(pair, args.out))
    emit(
        PAIR_SCHEMA,
        {"pair": pair.document(), "written": written, "prepared": made, "dry_run": args.dry_run},
    )
    return 0


def _pair(args: argparse.Namespace) -> int:
    if args.json:
        return _pair_json(args)
    pair = mpi.make_pair(args.site, args.image, mode=args.mpi_mode)
    console = plain_console()  # the image's names and versions print as text, never as markup
    if not quiet():
        console.print(f"host MPI:      {printable(pair.host.describe(), 400)}")
        container = printable(pair.container.describe(), 400)
        console.print(f"container MPI: {container} (found via {printable(pair.found.source)})")
        for reason in pair.verdict.reasons:
            console.print(f"  ok: {printable(reason, 400)}")
    for warning in pair.warnings:
        console.print(Text.assemble("  ", ("warning", "yellow"), f": {printable(warning, 400)}"))
    if not quiet():
        for note in pair.found.notes:
            console.print(f"  note: {printable(note, 400)}")
    if args.dry_run:  # YAML escapes the controls in a value
        console.print(yaml.safe_dump(pair.document(), sort_keys=False, width=100))
        console.print(f"dry run: nothing written (would write {args.out or pair_path(args.image)})")
        return 0
    mpi.pair_target(pair, args.out)  # refused before --prepare changes the image
    if args.prepare:
        made = mpi.prepare_image_dir(pair, args.image)
        console.print(f"created in the image: {printable(', '.join(made), 2000)}")
    path = mpi.write_pair(pair, args.out)
    console.print(f"wrote {path}")
    return 0


def _check(args: argparse.Namespace) -> int:
    pair = mpi.make_pair(args.site, args.image, mode=args.mpi_mode)
    result = mpi.run_check(pair, python=args.python, timeout=args.timeout, nodes=args.nodes)
    table = Table(title=f"kit mpi check: {args.image} at {pair.site.name}")
    # the node column only where it proves something: ranks on different nodes
    apart = result.nodes > 1
    for col in (
        "rank",
        "size",
        *(["node"] if apart else []),
        f"MPI library (inside {pair.launch.runtime.command})",
        "mapped from",
        "allreduce",
    ):
        table.add_column(col, overflow="fold")
    for r in result.ranks:
        count = len(r.mapped) - len(r.libraries)
        shown = (
            r.libraries
            + ([f"+ {count} MCA components from {', '.join(r.component_dirs)}"] if count else [])
            + [f"C library: {c}" for c in r.libc]
        )
        table.add_row(
            str(r.rank),
            str(r.size),
            *([printable(r.host)] if apart else []),
            printable(r.library_version.partition("\n")[0]),
            "\n".join(printable(line, 400) for line in shown) or "-",
            printable(r.sum),
        )
    console = plain_console()  # the ranks' output prints as text, never as markup
    if result.ranks:
        console.print(table)
    for problem in result.problems:
        console.print(Text.assemble(("FAIL", "red"), f": {printable(problem, 2000)}"))
    if not result.ok:
        # the verdict names the launcher's telling line
        if result.output and not result.ranks and verbose():
            console.print(printable_lines(result.output))
        return 1
    where = f" across {result.nodes} nodes" if result.nodes > 1 else ""
    console.print(
        Text.assemble(
            ("PASS", "green"),
            f": the host MPI is loaded from the bind and a 2-rank allreduce{where} is right",
        )
    )
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    leaves = add_group(sub, "mpi", "pair an image's MPI with a site's host MPI")
    for name, func, text in (
        ("pair", _pair, "decide the pair and write IMAGE.pair.yaml"),
        (
            "check",
            _check,
            "run 2 ranks in the site's container runtime (ch-run, udocker) with the host MPI bound in",
        ),
    ):
        p = leaves.add_parser(name, help=text)
        p.add_argument("image", metavar="IMAGE", help="directory, tarball or SquashFS image")
        add_site(p)
        add_mpi_mode(p)
        p.set_defaults(func=func)
        if name == "pair":
            p.add_argument("--out", metavar="FILE", help="pair file (default: IMAGE.pair.yaml)")
            p.add_argument(
                "--prepare",
                action="store_true",
                help="create the mount points and alias links in a writable directory image",
            )
            add_dry_run(p, "print the pair file, write nothing")
            add_json(p, PAIR_SCHEMA)
        else:
            p.add_argument("--python", default="python3", help="python inside the image")
            p.add_argument(
                "--timeout",
                type=number(0.1, float, 86400),
                default=120.0,
                help="seconds the 2-rank run may take",
            )
            p.add_argument(
                "--nodes",
                type=number(1, int, 2),
                choices=(1, 2),
                default=1,
                metavar="N",
                help="1 or 2: 2 puts one rank on each of 2 nodes (a Slurm site; salloc's, "
                "or the job's)",
            )
