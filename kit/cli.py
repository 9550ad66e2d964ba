"""The `kit` command line: a thin layer over the library; each group lives in kit/commands/."""
from __future__ import annotations

import argparse
import importlib
import sys

from kit.errors import KitError

# Each module defines register(subparsers) adding one command group whose leaf
# parsers set `func(args) -> int`.
GROUPS = ["site", "mpi", "image", "transfer"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kit", description=__doc__)
    sub = parser.add_subparsers(dest="group", required=True, metavar="COMMAND")
    for name in GROUPS:
        importlib.import_module(f"kit.commands.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
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
