"""`kit site validate|show|probe`: check, read and create site configs."""

from __future__ import annotations

import argparse
import sys

from kit.commands.common import SITE_HELP, add_group
from kit.excerpt import printable
from kit.jsonout import add_json, emit
from kit.site import load_site
from kit.site.probe import probe_yaml, write_probe
from kit.site.schema import SiteError
from kit.site.show import JSON_SCHEMA, print_summary, summary_document


def _validate(args: argparse.Namespace) -> int:
    failed = 0
    for name in args.files:
        try:
            site = load_site(name)
        except SiteError as exc:
            print(exc, file=sys.stderr)
            failed += 1
        else:
            print(f"{site.path}: ok ({printable(site.name)})")
    return 1 if failed else 0


def _show(args: argparse.Namespace) -> int:
    site = load_site(args.site)
    if args.json:
        emit(JSON_SCHEMA, summary_document(site))
    else:
        print_summary(site)
    return 0


def _probe(args: argparse.Namespace) -> int:
    if args.out:
        path = write_probe(args.out, args.name)
        print(f"wrote {path}; it validates — check the values marked in its header")
    else:
        sys.stdout.write(probe_yaml(args.name))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    leaves = add_group(
        sub, "site", "describe a site: its nodes, scheduler, host MPI, container runtime"
    )
    _add_validate(leaves)
    _add_show(leaves)
    _add_probe(leaves)


def _add_validate(leaves: argparse._SubParsersAction) -> None:
    p = leaves.add_parser("validate", help="check site config files (or names) against the schema")
    p.add_argument("files", nargs="+", metavar="FILE", help="a site config file or a site name")
    p.set_defaults(func=_validate)


def _add_show(leaves: argparse._SubParsersAction) -> None:
    p = leaves.add_parser(
        "show", help="summary of a site, with theoretical peak per node and island"
    )
    p.add_argument("site", metavar="SITE", help=SITE_HELP)
    add_json(p, JSON_SCHEMA)
    p.set_defaults(func=_show)


def _add_probe(leaves: argparse._SubParsersAction) -> None:
    p = leaves.add_parser("probe", help="write a site config describing this host")
    p.add_argument("--out", metavar="FILE", help="write here (atomically) instead of stdout")
    p.add_argument("--name", help="site name (default: the host name)")
    p.set_defaults(func=_probe)
