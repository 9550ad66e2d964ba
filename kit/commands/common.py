"""Arguments several `kit` commands share, declared once: one spelling, one help text.

The rules every command follows (tests/test_cli_walk.py walks the parser tree for them):
a directory a command reads is a positional DIR, one it makes or writes into is --dir DIR; a node
count is --nodes (N for one run, N[,N...] for a sweep or a forecast); --json comes from
kit.jsonout.add_json with its schema name; defaults are shown by HelpFormatter, never written by
hand; a closed set of values has choices; an old spelling keeps working with a one-line note on
stderr (deprecated()).
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import sys
import textwrap
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Callable

from kit.errors import KitError
from kit.extras import EXTRA_OF_MODULE, missing_extra

CONVENTIONS = """\
- **Work directories.** A directory a command reads, made by an earlier command, is a positional
  `DIR` (`kit scale submit DIR`, `kit study run DIR`, `kit vcluster status [DIR]`). A directory a
  command makes or writes into is `--dir DIR` (`kit scale plan --dir DIR`,
  `kit study plan SPEC --dir DIR`, `kit transfer bundle IMAGE... --dir DIR`).
- **Node counts.** Every node count is `--nodes`: `N` where a command runs one thing,
  `N[,N...]` (a comma list) where it sweeps or forecasts.
- **`--json`.** One JSON document on stdout whose `schema` field names its form and version
  (e.g. `kit-scale-collect/1`); an error is one JSON line on stderr.
- **Defaults** are shown in each option's help as `(default: X)`.
- **Old spellings** keep working for now and print one note on stderr naming the new one.
"""

SITE_HELP = (
    "site name (looked up in KIT_SITE_PATH, ~/.config/kit/sites, then the shipped ones) "
    "or config file"
)


class HelpFormatter(argparse.HelpFormatter):
    """Every `kit` parser's formatter: it appends "(default: X)" from the option's argparse
    default, so a help text never states a default that the code no longer has; and it never
    breaks a line inside a word, so a shown command or path can be copied whole."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        return _wrapper(width).wrap(" ".join(text.split()))

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        wrapper = _wrapper(width)
        wrapper.initial_indent = wrapper.subsequent_indent = indent
        return wrapper.fill(" ".join(text.split()))

    def _get_help_string(self, action: argparse.Action) -> str | None:
        shown = shown_default(action.default)
        if shown is None or not action.help:
            return action.help
        return f"{action.help} (default: {shown.replace('%', '%%')})"


def _wrapper(width: int) -> textwrap.TextWrapper:
    return textwrap.TextWrapper(width, break_long_words=False, break_on_hyphens=False)


class TopHelpFormatter(argparse.RawDescriptionHelpFormatter, HelpFormatter):
    """`kit --help`: its examples keep their lines."""


def shown_default(value: Any) -> str | None:
    """A default as a user would type it; None where there is none to show."""
    if value is None or value is False or value is argparse.SUPPRESS or value == []:
        return None
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value))
    return f"{value:g}" if isinstance(value, float) else str(value)


class Verbs(argparse._SubParsersAction):
    """A command group's subcommands. Each one added re-derives the group's help from its verbs,
    so `kit GROUP --help` and `kit --help` list every verb, and which need an extra."""

    group: argparse.ArgumentParser
    listing: Any  # the group's line in `kit --help`
    purpose: str

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        """``extra=NAME``: the verb needs that pip extra; its help says so, and kit.cli ends it
        with the one line naming the extra before it runs."""
        extra = kwargs.pop("extra", None)
        kwargs.setdefault("formatter_class", HelpFormatter)
        parser = super().add_parser(name, **kwargs)
        if extra:
            parser.epilog = f"Needs the [{extra}] extra: {install_line(extra)}."
            parser.set_defaults(needs=(extra, f"{self.group.prog} {name}"))
        self._describe()
        return parser

    def _describe(self) -> None:
        verbs = list(self.choices)
        needs: dict[str, list[str]] = {}
        for verb, parser in self.choices.items():
            extra = (parser.get_default("needs") or (None,))[0]
            if extra:
                needs.setdefault(extra, []).append(verb)
        notes = [
            f"{', '.join(names)} need{'s' if len(names) == 1 else ''} the [{extra}] extra"
            + ("" if missing_module(extra) is None else f", not installed: {install_line(extra)}")
            for extra, names in needs.items()
        ]
        self.listing.help = f"{self.purpose}: {', '.join(verbs)}" + "".join(
            f" ({note})" for note in notes if "not installed" in note
        )
        self.group.description = (
            f"{self.purpose[:1].upper()}{self.purpose[1:]}: {', '.join(verbs)}."
        )
        self.group.epilog = "; ".join(notes) + "." if notes else None


def add_group(sub: argparse._SubParsersAction, name: str, purpose: str) -> Verbs:
    """Command group NAME (``purpose``: what a user does with it); its subcommands are parsed
    into `NAME_command` (one pattern for all), and its help lists them as they are added."""
    group = sub.add_parser(name, help=purpose, formatter_class=HelpFormatter)
    verbs = group.add_subparsers(
        dest=f"{name}_command", required=True, metavar="SUBCOMMAND", action=Verbs
    )
    verbs.group, verbs.listing, verbs.purpose = group, sub._choices_actions[-1], purpose
    return verbs


def install_line(extra: str) -> str:
    return f"pip install 'secure-site-kit[{extra}]'"


def missing_module(extra: str) -> str | None:
    """The first module the pip extra brings that this Python cannot import, or None."""
    for module, of in EXTRA_OF_MODULE.items():
        if of == extra and importlib.util.find_spec(module) is None:
            return module
    return None


def require_extra(args: argparse.Namespace) -> None:
    """Before a command that declared an extra runs: the one-line error naming the extra to
    install, rather than whatever its first import or its first check of the input says."""
    extra, command = getattr(args, "needs", None) or (None, "")
    module = missing_module(extra) if extra else None
    error = missing_extra(ModuleNotFoundError(name=module), command) if module else None
    if error is not None:
        raise error


def deprecated(old: str, new: str) -> None:
    """The one note an old spelling prints; it keeps working until it goes."""
    print(f"kit: note: `{old}` is now `{new}`; the old spelling will go", file=sys.stderr)


def add_read_dir(
    p: argparse.ArgumentParser, text: str, *, default: Path | None = None, optional: bool = False
) -> None:
    """DIR, a directory an earlier command made and this one reads (positional, by the rule)."""
    p.add_argument(
        "dir",
        type=Path,
        metavar="DIR",
        nargs="?" if optional or default is not None else None,
        default=default,
        help=text,
    )


def add_made_dir(p: argparse.ArgumentParser, text: str, default: Path | None = None) -> None:
    """--dir DIR, a directory this command makes or writes into (an option, by the rule)."""
    p.add_argument("--dir", type=Path, default=default, metavar="DIR", help=text)


def new_spelling(
    args: argparse.Namespace, dest: str, *, old: str, new: str, default: Any = None
) -> Any:
    """The value of ``dest``, or of its old spelling (dest ``old_DEST``, hidden from --help) with
    the note; both at once is refused."""
    value = getattr(args, f"old_{dest}")
    if value is None:
        return getattr(args, dest)
    if getattr(args, dest) != default:
        raise KitError(f"`{old}` and `{new}` both given", fix=f"give only `{new}`")
    deprecated(old, new)
    return value


class Words:
    """The choices of a comma list (e.g. fp32,bf16): a list is in it when all its words are, and
    it iterates over the words, for --help and shell completion."""

    def __init__(self, words: Iterable[str]):
        self.words = tuple(words)

    def __contains__(self, value: object) -> bool:
        return isinstance(value, list) and bool(value) and all(w in self.words for w in value)

    def __iter__(self) -> Iterator[str]:
        return iter(self.words)


def comma_words(text: str) -> list[str]:
    """An argparse type: the words of a comma list (checked against Words choices)."""
    return [w.strip() for w in text.split(",") if w.strip()]


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
        f"strict (equal){'; ' + more if more else ''} (also spelt --mode)",
    )


def add_dry_run(p: argparse.ArgumentParser, text: str) -> None:
    """--dry-run, with what it does instead in this command."""
    p.add_argument("--dry-run", action="store_true", help=text)


def add_run_args(p: argparse.ArgumentParser) -> None:
    """Arguments a single run and a sweep share."""
    # here, not at the top: `kit site ...` imports no kit.slurm
    from kit.slurm.spec import (
        DEFAULT_WALLTIME,
    )

    add_site(p)
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument(
        "--image",
        help="the image as the site sees it, or its IMAGE.pair.yaml (ch-run or udocker, "
        "the site's container.runtime, with the host MPI bound in)",
    )
    where.add_argument(
        "--no-container",
        action="store_true",
        help="run the site's own Python environment, no container (the paper's Tables 5, 6)",
    )
    p.add_argument(
        "--walltime",
        metavar="HH:MM:SS",
        help=f"per job (default: {DEFAULT_WALLTIME}, or the site's max_walltime if shorter)",
    )
    p.add_argument("--python", default="python3", help="the Python that runs gan3d")
    p.add_argument("--partition", help="override scheduler.partition")
    p.add_argument("--account", help="override scheduler.account")
    add_made_dir(p, "run directory: scripts, logs, results", Path("runs"))
    add_dry_run(p, "check and print; write and submit nothing")
    add_train_args(p, "after --: arguments for python -m gan3d train (data, batch, epochs, ...)")


def add_train_args(p: argparse.ArgumentParser, text: str) -> None:
    p.add_argument("train_args", nargs=argparse.REMAINDER, metavar="ARGS", help=text)


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
