"""`kit vcluster up --nodes N|down|status`: a virtual multi-node Slurm cluster on this machine
(root)."""

from __future__ import annotations

import argparse
from pathlib import Path

from kit.commands.common import (
    add_dry_run,
    add_group,
    add_made_dir,
    add_read_dir,
    new_spelling,
    number,
)
from kit.errors import KitError
from kit.excerpt import printable
from kit.jsonout import add_json, emit
from kit.vcluster import down, status, up
from kit.vcluster.cluster import MAX_NODES, preview
from kit.vcluster.sites import default_intel_mpi
from kit.verbosity import quiet

JSON_SCHEMA = "kit-vcluster-status/1"
DEFAULT_DIR = Path("build/vcluster")


def _up(args: argparse.Namespace) -> int:
    args.nodes = new_spelling(
        args, "nodes", old="kit vcluster up N", new="kit vcluster up --nodes N"
    )
    if args.nodes is None:
        raise KitError("kit vcluster up: how many nodes?", fix="give --nodes N, e.g. --nodes 2")
    intel = args.intel_mpi or default_intel_mpi()
    if args.dry_run:
        subnet, nodes = preview(
            args.name,
            args.nodes,
            args.subnet,
            intel_mpi=intel,
            directory=args.dir,
            binds=tuple(args.bind),
        )
        print(
            f"dry run: would start {args.nodes} node(s) in {args.dir.absolute()}, "
            f"bridge kvc-{args.name} on {subnet}"
        )
        for n in nodes:
            print(f"  {n['name']}: namespace {n['netns']}, address {n['address']}, slurmd")
        print(
            f"  host MPI: Intel MPI at {intel}"
            if intel
            else "  host MPI: no Intel MPI found (see --intel-mpi)"
        )
        return 0
    report = up(
        args.dir, args.nodes, args.name, subnet=args.subnet, intel_mpi=intel, binds=tuple(args.bind)
    )
    s = report.state
    named = ", ".join(f"{n['name']} {n['address']}" for n in s.nodes)
    print(
        printable(  # a running cluster's names come from its state file
            f"{'started' if report.started else 'already running:'} virtual cluster {s.name}: "
            f"{len(s.nodes)} node(s) ({named}) on bridge {s.bridge}, {s.subnet}",
            2000,
        )
    )
    for path in report.sites:
        print(f"site config {path}")
    if not quiet():
        first = report.sites[0] if report.sites else "SITE.yaml"
        image = f"{s.directory}/images/{s.name}/gan3d.sqfs"
        print(
            f"use it:\n  export SLURM_CONF={s.conf}\n  sinfo\n"
            f"  kit image convert gan3d.tar {image} --site {first} && ln -s gan3d.sqfs "
            f"{s.directory}/images/{s.name}/gan3d.current\n"
            f"  kit scale plan --site {first} --image {image} --nodes 1,2 "
            f"--ranks-per-node 1,2 --dir {s.directory}/sweep -- --preset tiny --data ...\n"
            f"  kit scale submit {s.directory}/sweep && kit scale collect {s.directory}/sweep --wait\n"
            f"stop it: kit vcluster down {s.directory}"
        )
        if not intel:
            print(
                "no Intel MPI runtime found: pip install --prefix DIR impi-rt==2021.18.1, "
                "then kit vcluster down and up --intel-mpi DIR for the Intel MPI site configs"
            )
    return 0


def _old_dir(args: argparse.Namespace, verb: str) -> None:
    """`kit vcluster down|status --dir D`, the old spelling of `... D`."""
    args.dir = new_spelling(
        args,
        "dir",
        old=f"kit vcluster {verb} --dir DIR",
        new=f"kit vcluster {verb} DIR",
        default=DEFAULT_DIR,
    )


def _down(args: argparse.Namespace) -> int:
    _old_dir(args, "down")
    removed = down(args.dir, args.dry_run)
    if args.dry_run:
        print(
            "\n".join(f"would stop/remove {printable(r, 400)}" for r in removed)
            or "dry run: nothing recorded"
        )
        return 0
    print(
        f"removed {len(removed)} thing(s) the cluster in {args.dir.absolute()} made"
        if removed
        else f"no virtual cluster recorded in {args.dir.absolute()}: nothing to do"
    )
    return 0


def _status(args: argparse.Namespace) -> int:
    _old_dir(args, "status")
    doc = status(args.dir)
    if args.json:
        emit(JSON_SCHEMA, doc)
        return 0 if doc["running"] else 1
    if not doc["nodes"]:
        print(f"no virtual cluster in {doc['dir']}")
        return 1
    print(  # the state file's and sinfo's values: printed escaped
        printable(
            f"virtual cluster {doc['name']} in {doc['dir']}: {doc['subnet']}, "
            f"bridge {doc['bridge']}, SLURM_CONF={doc['slurm_conf']}",
            2000,
        )
    )
    for n in doc["nodes"]:
        name, address = printable(n["name"], 100), printable(n["address"], 100)
        print(f"  {name:<12} {address:<15} {printable(n['slurm_state'] or '-', 100)}")
    for p in doc["problems"]:
        print(f"  problem: {printable(p, 1000)} (fix: kit vcluster down {doc['dir']}, then up)")
    return 1 if doc["problems"] else 0


def register(sub: argparse._SubParsersAction) -> None:
    leaves = add_group(sub, "vcluster", "a virtual multi-node Slurm cluster on this machine (root)")

    what = "the cluster's state, slurm.conf, site configs and logs"

    def with_dir(p: argparse.ArgumentParser) -> None:
        """DIR, the cluster up made; --dir DIR, its old spelling, still works."""
        add_read_dir(p, what, default=DEFAULT_DIR)
        p.add_argument("--dir", dest="old_dir", type=Path, help=argparse.SUPPRESS)

    p = leaves.add_parser(
        "up",
        help="start N nodes (namespaces with slurmd), slurmctld and munged; write site configs; "
        "a running cluster is reported, not restarted",
    )
    nodes = number(1, int, MAX_NODES)
    p.add_argument("--nodes", type=nodes, metavar="N", help="how many nodes; required")
    p.add_argument("old_nodes", type=nodes, nargs="?", help=argparse.SUPPRESS)  # `up N`: old
    add_made_dir(p, what, DEFAULT_DIR)
    p.add_argument(
        "--name",
        default="vc",
        help="cluster name: nodes NAME-1..N, interfaces kvc-NAME*",
    )
    p.add_argument("--subnet", help="a private /24 (default: the first free one in 10.213.0.0/16)")
    p.add_argument(
        "--intel-mpi",
        type=Path,
        metavar="PREFIX",
        help="Intel MPI runtime prefix for the Intel MPI site configs (default: "
        "the newest impi-rt in ~/.cache/secure-site-kit/impi)",
    )
    p.add_argument(
        "--bind",
        action="append",
        default=[],
        metavar="SRC:DST",
        help="another directory the site configs bind into containers (data, sweeps)",
    )
    add_dry_run(p, "print what would be made")
    p.set_defaults(func=_up)
    p = leaves.add_parser(
        "down", help="stop and remove exactly what up made (also after an up that was killed)"
    )
    with_dir(p)
    add_dry_run(p, "list what would be stopped and removed")
    p.set_defaults(func=_down)
    p = leaves.add_parser("status", help="the cluster's nodes, addresses and Slurm states")
    with_dir(p)
    add_json(p, JSON_SCHEMA)
    p.set_defaults(func=_status)
