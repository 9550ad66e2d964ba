"""The `kit` command line: a thin layer over the library; each group lives in kit/commands/."""
from __future__ import annotations

import argparse
import importlib
import sys

from kit.errors import KitError

# Each module defines register(subparsers) adding one command group whose leaf
# parsers set `func(args) -> int`.
GROUPS = ["site", "mpi", "image", "transfer", "slurm", "scale"]


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """With a group named first in `argv`, only that group is imported: its libraries (Fabric,
    the MPI probes, ...) are what a command's start-up time is made of."""
    parser = argparse.ArgumentParser(prog="kit", description=__doc__)
    sub = parser.add_subparsers(dest="group", required=True, metavar="COMMAND")
    first = next((a for a in argv or [] if not a.startswith("-")), None)
    for name in [first] if first in GROUPS else GROUPS:
        importlib.import_module(f"kit.commands.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser(argv).parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KitError as exc:
        print(f"kit: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("kit: interrupted; nothing was left half-written", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
