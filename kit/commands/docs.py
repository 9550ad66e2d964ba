"""`kit docs [TOPIC]`: the kit's documentation, offline: the topics, one page, or its path."""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys

from kit import docs


def _list() -> None:
    for group in docs.groups():
        print(f"{group.title}:")
        width = max(len(t) for t in group.topics)
        for topic in group.topics:
            print(f"  {topic:{width}}  {docs.title(topic)}")
    print("\n`kit docs TOPIC` prints a page (a unique end of a topic will do: `kit docs deploy`).")


def _pager() -> list[str] | None:
    """The pager for a terminal: $PAGER (empty: none), else `less -R` where installed."""
    chosen = os.environ.get("PAGER")
    if chosen is not None:
        return shlex.split(chosen) or None
    return ["less", "-R"] if shutil.which("less") else None


def _show(text: str) -> None:
    """A page through the pager when stdout is a terminal (one that cannot start: plain)."""
    pager = _pager() if sys.stdout.isatty() else None
    if pager is not None:
        try:
            subprocess.run(pager, input=text, text=True, check=False)
            return
        except OSError:
            pass
    sys.stdout.write(text)


def _docs(args: argparse.Namespace) -> int:
    if args.topic is None:
        _list()
        return 0
    topic = docs.resolve(args.topic)
    if args.path:
        print(docs.topics()[topic].resolve())
    else:
        _show(docs.page(topic))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "docs",
        help="read the kit's documentation offline",
        description="Without TOPIC, list the topics; with one, print its page (through $PAGER, "
        "else `less -R`, when stdout is a terminal). The pages ship with the kit: "
        "no network and no checkout needed.",
    )
    p.add_argument(
        "topic",
        nargs="?",
        metavar="TOPIC",
        help="a topic from the list, e.g. `security`, `howto/deploy`, "
        "or a unique end of one (`deploy`)",
    )
    p.add_argument(
        "--path",
        action="store_true",
        help="print the page's file path instead of the page (to open it in an editor)",
    )
    p.set_defaults(func=_docs)
