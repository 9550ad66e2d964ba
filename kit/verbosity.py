"""How much a command says: the one setting `kit -q`/`-v` makes and every command reads.

A context variable rather than a flag threaded through every library call: the library never
prints, and the commands ask this module instead of each growing its own -q/-v logic.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from kit.errors import KitError

QUIET, NORMAL, VERBOSE = 0, 1, 2
_level: ContextVar[int] = ContextVar("kit_verbosity", default=NORMAL)


def quiet() -> bool:
    """Only errors, warnings and the command's result: no progress bars, no notes."""
    return _level.get() == QUIET


def verbose() -> bool:
    """Details too, e.g. every path a conversion dropped or changed."""
    return _level.get() == VERBOSE


def add_flags(parser: argparse.ArgumentParser, leaf: bool) -> None:
    """-q/-v on the top parser and on every leaf, so that `kit -v image convert` and `kit image
    convert -v` mean the same; a leaf's default must not undo the top parser's value."""
    default = argparse.SUPPRESS if leaf else False
    parser.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        default=default,
        help="only errors, warnings and the result: no progress bars, no notes",
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        default=default,
        help="details, e.g. every path dropped or changed, not only their counts",
    )


@contextmanager
def applied(args: argparse.Namespace) -> Iterator[None]:
    """The level the command line asked for, for the duration of one command."""
    q, v = getattr(args, "quiet", False), getattr(args, "verbose", False)
    if q and v:
        raise KitError("-q/--quiet and -v/--verbose contradict each other", fix="give one of them")
    token = _level.set(QUIET if q else VERBOSE if v else NORMAL)
    try:
        yield
    finally:
        _level.reset(token)
