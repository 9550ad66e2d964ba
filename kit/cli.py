"""The `kit` command line: a thin layer over the library; each group lives in kit/commands/."""

from __future__ import annotations

import argparse
import importlib
import sys
import traceback

from kit import __version__, interrupt
from kit.commands.common import HelpFormatter, TopHelpFormatter, require_extra
from kit.crash import (
    EXIT_ERROR,
    EXIT_READER_GONE,
    debug_requested,
    environment_problem,
    reader_gone,
    report_bug,
)
from kit.errors import KitError
from kit.extras import missing_extra
from kit.verbosity import add_flags, applied

DESCRIPTION = """\
Deploy AI training to an air-gapped HPC site and measure how it scales: build and convert the
container image, pair it with the site's MPI, move it in, run Slurm sweeps, forecast node-hours."""

EXAMPLES = """\
examples:
  kit site probe --out mysite.yaml                 describe this machine as a site
  kit image convert gan3d.tar gan3d.sqfs --site mysite
  kit mpi check gan3d.sqfs --site mysite           2 ranks with the host MPI bound in
  kit transfer push gan3d.sqfs --site mysite --install
  kit scale plan --site mysite --image gan3d.sqfs --nodes 1,2,4 --dir sweep -- --data DATA
  kit scale submit sweep; kit scale collect sweep --wait; kit scale report sweep

documentation: `kit docs` lists the topics, `kit docs TOPIC` prints one (e.g. kit docs howto/deploy);
`kit COMMAND --help` for each command."""

# Each module defines register(subparsers) adding one command group whose leaf
# parsers set `func(args) -> int`.
GROUPS = [
    "site",
    "mpi",
    "image",
    "transfer",
    "slurm",
    "scale",
    "study",
    "vcluster",
    "completion",
    "docs",
]


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """With a group named first in `argv`, only that group is imported: its libraries (Fabric,
    the MPI probes, ...) are what a command's start-up time is made of."""
    parser = argparse.ArgumentParser(
        prog="kit", description=DESCRIPTION, epilog=EXAMPLES, formatter_class=TopHelpFormatter
    )
    parser.add_argument(
        "--debug",
        action="store_true",
        help="print the traceback of an internal error instead of writing it to a file",
    )
    parser.add_argument("--version", action=_Version)
    add_flags(parser, leaf=False)
    # `kit completion` needs the parser of every group (the commands never import kit.cli)
    parser.set_defaults(whole_tree=build_parser)
    sub = parser.add_subparsers(dest="group", required=True, metavar="COMMAND")
    first = next((a for a in argv or [] if not a.startswith("-")), None)
    for name in [first] if first in GROUPS else GROUPS:
        # a group registers without its extra: the extras are imported when a command runs
        importlib.import_module(f"kit.commands.{name}").register(sub)
    for child in parsers(parser)[1:]:
        child.formatter_class = HelpFormatter
    for leaf in leaves(parser):
        add_flags(leaf, leaf=True)
    return parser


class _Version(argparse.Action):
    """--version: the version and the git commit the kit runs from (a checkout's HEAD, else the one
    its wheel recorded when it was built), so a site can tell which code it installed. git is asked
    only when the option is given, not each time the parser is built."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **kwargs) -> None:
        super().__init__(
            option_strings,
            dest,
            nargs=0,
            default=argparse.SUPPRESS,
            help="show the version and the git commit of this kit and exit",
        )

    def __call__(self, parser: argparse.ArgumentParser, *args) -> None:
        from kit.code_commit import source_commit

        code = source_commit()
        # "unknown: why"
        commit = (
            f"{code['git_commit']}: {code['git_commit_basis']}"
            if code["git_commit"]
            else code["git_commit_basis"]
        )
        print(f"kit (secure-site-kit) {__version__}\ncommit {commit}")
        parser.exit()


def leaves(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """The parsers that run a command (they set `func`), depth first."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):  # aliases map to one parser
                found += leaves(child)
    return found if found or parser.get_default("func") is None else [parser]


def parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """This parser and every one below it (groups and leaves), depth first."""
    found = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):
                found += parsers(child)
    return found


def _paths_print_as_bytes() -> None:
    """A path of bytes that are not UTF-8 (Python holds them as surrogates) prints as those bytes,
    as in the C locale, instead of ending the command with UnicodeEncodeError under a UTF-8
    locale."""
    reconfigure = getattr(sys.stdout, "reconfigure", None)
    if reconfigure is not None and getattr(sys.stdout, "errors", None) == "strict":
        try:
            reconfigure(errors="surrogateescape")
        except (ValueError, OSError):  # a stream that cannot change (closed, or not a text wrapper)
            pass


def main(argv: list[str] | None = None) -> int:
    debug, argv = debug_requested(sys.argv[1:] if argv is None else argv)
    _paths_print_as_bytes()
    interrupt.install()
    args: argparse.Namespace | None = None
    try:
        args = build_parser(argv).parse_args(argv)
        require_extra(args)
        with applied(args):
            return int(args.func(args) or 0)
    except ImportError as exc:
        error = missing_extra(
            exc, "kit " + " ".join([a for a in argv if not a.startswith("-")][:2])
        )
        if error is None:
            return report_bug("kit", exc, debug)
        return _failed(error, _wants_json(args, argv))
    except KitError as exc:
        if debug:  # where it was raised, for a report on a message that names the wrong fix
            traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
        return _failed(exc, _wants_json(args, argv))
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (kit.interrupt.Terminated)
        # Outputs are renamed into place only when complete; what an interrupted command
        # leaves is temporary files with the kit's own names, which its next run removes.
        print(
            f"kit: {interrupt.signal_name(exc)}; outputs are replaced only when complete",
            file=sys.stderr,
        )
        return interrupt.exit_status(exc)
    except Exception as exc:  # a bug: one line here, the traceback in a file
        if reader_gone(exc):
            return EXIT_READER_GONE
        problem = environment_problem(exc)
        if problem is None:
            return report_bug("kit", exc, debug)
        return _failed(problem, _wants_json(args, argv))


def _wants_json(args: argparse.Namespace | None, argv: list[str]) -> bool:
    """Whether the command was run with --json: its parsed option, or, where the words could not
    be parsed into a command, --json among them."""
    if args is not None and isinstance(getattr(args, "json", None), bool):
        return args.json
    end = argv.index("--") if "--" in argv else len(argv)
    return "--json" in argv[:end]


def _failed(error: KitError, as_json: bool = False) -> int:
    """The one line on stderr: "kit: error: ..." or, with --json, one JSON object (documented
    in kit.commands.common.CONVENTIONS); stdout stays empty either way."""
    line = error.json_line(EXIT_ERROR) if as_json else f"kit: error: {error}"
    print(line, file=sys.stderr)
    return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
