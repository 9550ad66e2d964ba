"""`python -m kit.reference [--check] [--dir DIR]`: rewrite docs/reference/*.md from the code, or,
with --check, exit 1 naming the pages that differ."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kit.reference import directory, generate, stale, write
from kit.reference.markdown import COMMAND


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog=COMMAND, description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 if a page differs")
    ap.add_argument(
        "--dir", type=Path, help="where the pages go (default: docs/reference of this checkout)"
    )
    args = ap.parse_args(argv)
    where = args.dir or directory()
    pages = generate()
    changed = stale(pages, where)
    if args.check:
        for name in changed:
            print(f"{where / name}: differs from the code; fix: run {COMMAND}", file=sys.stderr)
        return 1 if changed else 0
    if changed:
        write({name: pages[name] for name in changed}, where)
    print(f"{len(changed)} of {len(pages)} pages rewritten in {where}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
