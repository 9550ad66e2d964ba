"""The reference pages generated from the code (docs/reference/*.md): the commands, the site
config's keys, the files and the environment variables. `python -m kit.reference` rewrites them;
tests/docs/test_reference.py fails when a committed page differs from what the code generates.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from kit.atomic import write_together
from kit.data import shipped


def _pages() -> dict[str, Callable[[], str]]:
    from kit.reference import cli, environment, files, site_config

    return {
        "cli.md": cli.render,
        "site-config.md": site_config.render,
        "files.md": files.render,
        "environment.md": environment.render,
    }


def directory() -> Path:
    """docs/reference of the source tree (kit/_data/docs links to docs/ in a checkout)."""
    return shipped("docs").resolve() / "reference"


def generate() -> dict[str, str]:
    """Each page's file name and the text the code makes of it now."""
    return {name: render() for name, render in _pages().items()}


def stale(pages: dict[str, str], where: Path) -> list[str]:
    """The pages whose file in ``where`` is missing or says something else."""
    return [
        name
        for name, text in pages.items()
        if not (where / name).is_file() or (where / name).read_text() != text
    ]


def write(pages: dict[str, str], where: Path) -> None:
    """All the pages or none (they name each other)."""
    write_together({where / name: text.encode() for name, text in pages.items()})
