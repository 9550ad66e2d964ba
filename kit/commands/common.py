"""Arguments several `kit` commands share, declared once: one spelling, one help text.

Old spellings users may have in scripts stay as aliases, named in --help.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Callable

SITE_HELP = (
    "site name (looked up in KIT_SITE_PATH, ~/.config/kit/sites, then the shipped ones) "
    "or config file"
)


def add_group(sub: argparse._SubParsersAction, name: str, text: str) -> argparse._SubParsersAction:
    """Command group NAME; its subcommands are parsed into `NAME_command` (one pattern for all)."""
    group = sub.add_parser(name, help=text)
    return group.add_subparsers(dest=f"{name}_command", required=True, metavar="SUBCOMMAND")


def add_site(p: argparse.ArgumentParser, required: bool = True, more: str = "") -> None:
    """--site, with what this command does with it (``more``)."""
    p.add_argument(
        "--site", required=required, metavar="SITE", help=SITE_HELP + (f"; {more}" if more else "")
    )


def add_mpi_mode(p: argparse.ArgumentParser, more: str = "") -> None:
    """--mpi-mode (--mode, its older spelling in `kit mpi`, still works)."""
    from kit.mpi.abi import MODES  # here, not at the top: `kit site ...` imports no kit.mpi

    p.add_argument(
        "--mpi-mode",
        "--mode",
        dest="mpi_mode",
        choices=MODES,
        default="full",
        help="minor-version rule of the MPI pair: major (ignore), full (warn if the host's is older), "
        f"strict (equal); default full{'; ' + more if more else ''} (also spelt --mode)",
    )


def add_dry_run(p: argparse.ArgumentParser, text: str) -> None:
    p.add_argument("--dry-run", action="store_true", help=text)


def add_run_args(p: argparse.ArgumentParser) -> None:
    """Arguments a single run and a sweep share."""
    from kit.slurm.spec import (
        DEFAULT_WALLTIME,
    )  # here, not at the top: `kit site ...` imports no kit.slurm

    add_site(p)
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument(
        "--image",
        help="the image as the site sees it, or its IMAGE.pair.yaml "
        "(ch-run or udocker, the site's container.runtime, with the host MPI bound in)",
    )
    where.add_argument(
        "--no-container",
        action="store_true",
        help="run the site's own Python environment, no container (the paper's Tables 5, 6)",
    )
    p.add_argument(
        "--walltime", help=f"HH:MM:SS per job (default {DEFAULT_WALLTIME}, at most the site's)"
    )
    p.add_argument(
        "--python", default="python3", help="the Python that runs gan3d (default python3)"
    )
    p.add_argument("--partition", help="override scheduler.partition")
    p.add_argument("--account", help="override scheduler.account")
    p.add_argument(
        "--dir", type=Path, default=Path("runs"), help="run directory: scripts, logs, results"
    )
    add_dry_run(p, "check and print; write and submit nothing")
    add_train_args(p, "after --: arguments for python -m gan3d train (data, batch, epochs, ...)")


def add_train_args(p: argparse.ArgumentParser, text: str) -> None:
    p.add_argument("train_args", nargs=argparse.REMAINDER, help=text)


def train_args(args: argparse.Namespace) -> tuple[str, ...]:
    """The words after `--`, for python -m gan3d train."""
    extra = list(args.train_args)
    return tuple(extra[1:] if extra[:1] == ["--"] else extra)


def number(minimum: float, kind: type = int, maximum: float = math.inf) -> Callable[[str], float]:
    """An argparse type: a finite number from minimum to maximum (a usage error otherwise, exit 2),
    so that no command takes inf, nan or a count below one by accident."""

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            value = None
        if value is None or not (minimum <= value <= maximum and math.isfinite(value)):
            low, high = _shown(minimum), _shown(maximum)
            bound = f">= {low}" if maximum == math.inf else f"from {low} to {high}"
            raise argparse.ArgumentTypeError(f"{text!r}: give a number {bound}")
        return value

    return parse


def _shown(bound: float) -> str:
    """A bound as a user types it: 1000000, not 1e+06."""
    return str(int(bound)) if math.isfinite(bound) and float(bound).is_integer() else f"{bound:g}"


def numbers(
    minimum: float, kind: type = int, *, maximum: float = math.inf, most: int = 64
) -> Callable[[str], list]:
    """An argparse type: comma-separated numbers (e.g. node counts 1,2,4,8), each through
    number(minimum, kind, maximum); at most ``most`` of them."""
    one = number(minimum, kind, maximum)
    kinds = "whole numbers" if kind is int else "numbers"
    bound = (
        f">= {_shown(minimum)}"
        if maximum == math.inf
        else f"from {_shown(minimum)} to {_shown(maximum)}"
    )

    def parse(text: str) -> list:
        words = [w.strip() for w in text.split(",") if w.strip()] if len(text) <= 16 * most else []
        try:
            if 0 < len(words) <= most:
                return [one(w) for w in words]
        except argparse.ArgumentTypeError:
            pass
        raise argparse.ArgumentTypeError(
            f"{text[:80]!r}: give comma-separated {kinds} {bound} (at most {most}), e.g. 1,2,4,8"
        )

    return parse
