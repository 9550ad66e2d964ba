"""`kit completion bash|zsh`: print a shell completion script for kit."""

from __future__ import annotations

import argparse
import sys

from kit.completion import SHELLS, script


def _print(args: argparse.Namespace) -> int:
    sys.stdout.write(script(args.shell, args.whole_tree()))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "completion",
        help="print a shell completion script",
        description="Print a completion script for SHELL, "
        "e.g. `kit completion bash > ~/.local/share/bash-completion/completions/kit`.",
    )
    p.add_argument("shell", choices=SHELLS, metavar="SHELL", help="bash or zsh")
    p.set_defaults(func=_print)
