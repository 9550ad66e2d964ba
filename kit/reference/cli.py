"""docs/reference/cli.md: every `kit` command and `python -m gan3d` command, walked from their
argparse parsers: usage, description and a table of arguments, so the page says what --help says.

What varies from machine to machine stays out: the parsers are built with the environment
variables the code reads removed (a default may come from one), usage is formatted at a fixed
width, and a group's note of which extras are not installed here is left out.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
from collections.abc import Iterator, Sequence

from kit.reference import keys
from kit.reference.environment import MEANINGS
from kit.reference.markdown import GENERATED, paragraph, table

USAGE_WIDTH = 100
HEADERS = ("argument", "value", "default", "choices", "help")
WIDTHS = (30, 22, 24, 30, 76)  # at most markdown.MAX_LINE with the separators
GAN3D_MAIN = "gan3d.__main__"


def render() -> str:
    from kit.commands import common

    with _plain_environment():
        kit = _kit_parser()
        gan3d = _gan3d_parsers()
    parts = [
        "# Command reference\n",
        paragraph(GENERATED),
        paragraph(
            "Every `kit` command, then gan3d's (`python -m gan3d COMMAND`, the training inside the image). "
            "Each command's own `--help` says the same; `kit docs` lists the guides."
        ),
    ]
    parts += ["## Conventions", common.CONVENTIONS.strip()]  # the CLI's own text, as written
    parts += [
        "## Options of every command",
        paragraph(
            "Given before the command (`kit -v scale plan ...`); "
            "`-q` and `-v` also after it (`kit scale plan -v ...`)."
        ),
        _arguments(kit, leaf=False),
    ]
    if kit.epilog:
        parts += ["```text\n" + kit.epilog.strip() + "\n```"]
    commands = list(_commands(kit))
    parts += ["## Commands", "\n".join(_index_line(p, depth) for p, depth, *_ in commands)]
    parts += [_section(*command) for command in commands]
    parts += ["## gan3d", _gan3d_intro()]
    parts += [_section(p, 2) for p in gan3d]
    return "\n\n".join(part.rstrip("\n") for part in parts) + "\n"


@contextlib.contextmanager
def _plain_environment() -> Iterator[None]:
    """The environment without the variables the code reads, while the parsers are built."""
    saved = {k: v for k, v in os.environ.items() if k in MEANINGS}
    for k in saved:
        del os.environ[k]
    try:
        yield
    finally:
        os.environ.update(saved)


def _kit_parser() -> argparse.ArgumentParser:
    from kit.cli import build_parser

    return build_parser()


class _Built(Exception):
    """Carries the parser a command's main() built, stopped before it parses anything."""


@contextlib.contextmanager
def _stopped_at_parse() -> Iterator[None]:
    """parse_args raising _Built with its parser: gan3d's commands build their parser inside
    main(), and this takes it from there without running the command."""
    original = argparse.ArgumentParser.parse_args

    def stop(self: argparse.ArgumentParser, *args: object, **kwargs: object) -> None:
        raise _Built(self)

    argparse.ArgumentParser.parse_args = stop  # type: ignore[assignment,method-assign]
    try:
        yield
    finally:
        argparse.ArgumentParser.parse_args = original  # type: ignore[method-assign]


def _gan3d_parsers() -> list[argparse.ArgumentParser]:
    """The parser of each `python -m gan3d` command (its modules import numpy, not TensorFlow)."""
    commands = importlib.import_module(GAN3D_MAIN).COMMANDS
    found = []
    for name, (module, _help) in commands.items():
        with _stopped_at_parse():
            try:
                importlib.import_module(module).main([])
            except _Built as built:
                found.append(built.args[0])
                continue
        raise RuntimeError(f"python -m gan3d {name}: main() returned without parsing arguments")
    return found


def _gan3d_intro() -> str:
    commands = importlib.import_module(GAN3D_MAIN).COMMANDS
    rows = [[f"`python -m gan3d {name}`", text] for name, (_module, text) in commands.items()]
    intro = paragraph(
        "The workload: `kit slurm` and `kit scale` write its command lines into batch scripts; "
        "`kit study` searches its options. It needs the `[train]` extra (TensorFlow, Horovod) "
        "to run; `demo` and `simulate` run on a laptop."
    )
    return f"{intro}\n\n" + table(["command", "what it does"], rows)


Command = tuple[argparse.ArgumentParser, int, list[str], str]


def _commands(parser: argparse.ArgumentParser, depth: int = 2) -> Iterator[Command]:
    """Every command group and command below ``parser``, depth first: its parser, its heading
    level, the other names it answers to (old spellings kept) and its line in its group's help."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            for child in dict.fromkeys(action.choices.values()):
                names = [name for name, p in action.choices.items() if p is child]
                yield child, depth, names[1:], helps.get(names[0], "")
                yield from _commands(child, depth + 1)


def _has_verbs(parser: argparse.ArgumentParser) -> bool:
    return any(isinstance(a, argparse._SubParsersAction) for a in parser._actions)


def _anchor(prog: str) -> str:
    return prog.replace(" ", "-").lower()


def _index_line(parser: argparse.ArgumentParser, depth: int) -> str:
    indent = "  " * (depth - 2)
    return f"{indent}- [`{parser.prog}`](#{_anchor(parser.prog)})"


def _section(
    parser: argparse.ArgumentParser, depth: int, aliases: Sequence[str] = (), summary: str = ""
) -> str:
    """One command: heading, its other names, description (else its line in its group's help),
    usage and arguments."""
    parts = [f"{'#' * min(depth + 1, 6)} {parser.prog}"]
    if aliases:
        parts.append("Also spelt " + ", ".join(f"`{a}`" for a in aliases) + ".")
    if parser.description or summary:
        parts.append(paragraph(parser.description or summary))
    if not _has_verbs(parser) and parser.epilog:
        parts.append(paragraph(parser.epilog))
    parts.append(f"```text\n{_usage(parser)}\n```")
    arguments = _arguments(parser, leaf=True)
    if arguments:
        parts.append(arguments)
    return "\n\n".join(parts)


def _usage(parser: argparse.ArgumentParser) -> str:
    formatter = argparse.HelpFormatter(parser.prog, width=USAGE_WIDTH)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups)
    return formatter.format_help().strip()


def _arguments(parser: argparse.ArgumentParser, *, leaf: bool) -> str:
    """The table of a parser's arguments; on a command, less -h and the -q/-v every command has
    (listed once, at the top)."""
    formatter = argparse.HelpFormatter(parser.prog, width=USAGE_WIDTH)
    rows = []
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        if action.help == argparse.SUPPRESS or (leaf and action.dest in ("quiet", "verbose")):
            continue
        rows.append(
            [
                ", ".join(f"`{s}`" for s in action.option_strings) or f"`{_metavar(action)}`",
                _value(action),
                _default(action),
                _choices(action),
                formatter._expand_help(action) if action.help else "",
            ]
        )
    return table(HEADERS, rows, WIDTHS) if rows else ""


def _metavar(action: argparse.Action) -> str:
    if isinstance(action.metavar, tuple):
        return " ".join(action.metavar)
    if action.metavar:
        return action.metavar
    return action.dest.upper() if action.option_strings else action.dest


def _value(action: argparse.Action) -> str:
    """What the argument takes, as usage writes it (`N`, `[FILE ...]`); nothing for a flag."""
    if action.nargs == 0:
        return ""
    m, nargs = _metavar(action), action.nargs
    if isinstance(nargs, int):
        return "`" + " ".join([m] * nargs) + "`"
    forms = {"?": f"[{m}]", "*": f"[{m} ...]", "+": f"{m} [{m} ...]", argparse.REMAINDER: "..."}
    text = m if nargs is None else forms.get(nargs)
    return f"`{text}`" if text else ""


def _default(action: argparse.Action) -> str:
    """The default as `--help` shows it (one formatter for both), or "required"."""
    from kit.commands.common import shown_default

    if action.required and action.option_strings:
        return "required"
    shown = None if action.nargs == 0 else shown_default(action.default)
    return "" if shown is None else keys.value(shown)


def _choices(action: argparse.Action) -> str:
    if not action.choices or isinstance(action.choices, dict):
        return ""
    choices = list(action.choices)  # any iterable argparse accepts (a comma list's words)
    shown = [f"`{c}`" for c in choices[: keys.MAX_CHOICES]]
    more = len(choices) - keys.MAX_CHOICES
    return ", ".join(shown) + (f" and {more} more" if more > 0 else "")
