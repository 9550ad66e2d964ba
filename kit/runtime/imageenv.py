"""An image's own environment as Charliecloud keeps it (IMAGE/ch/environment, its recipe's ENV):
read for a runtime that does not apply it itself (kit.runtime.udocker)."""

from __future__ import annotations

import os
import re
from pathlib import Path

from kit.errors import KitError
from kit.excerpt import shown
from kit.readfile import decode
from kit.rootfs import Root

ENVIRONMENT = "ch/environment"  # one KEY=VALUE a line
ENV_MAX = 1 << 16  # bytes of an image's environment file read
ENV_LINE = re.compile(r"([A-Za-z_][A-Za-z0-9_]{0,127})=(.*)")


def image_environment(image: str | os.PathLike[str]) -> dict[str, str]:
    """The image's own environment (IMAGE/ch/environment, read inside the image root: a link there
    never leads out of it), in file order; {} when the image has none."""
    root_path = Path(os.path.expanduser(str(image)))
    with Root(root_path) as root:
        return environment_in(root)


def environment_in(root: Root) -> dict[str, str]:
    """ch/environment of an open image root by Charliecloud's rules: one KEY=VALUE a line, one pair
    of enclosing quotes stripped, blank lines skipped; {} when there is none."""
    data = root.read_regular(ENVIRONMENT, ENV_MAX)
    return {} if data is None else parse_environment(data, root.path / ENVIRONMENT)


def parse_environment(data: bytes, where: Path) -> dict[str, str]:
    """The text of a ch/environment (``where`` names it in errors)."""
    env: dict[str, str] = {}
    for number, line in enumerate(decode(data, where, "image environment").splitlines(), 1):
        if not line.strip():
            continue
        match = ENV_LINE.fullmatch(line)
        if match is None:
            raise KitError(
                f"{shown(line, 80)} is not KEY=VALUE",
                fix="re-convert the image (kit image convert writes one KEY=VALUE a line)",
                where=f"{where}:{number}",
            )
        value = match[2]
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        env[match[1]] = value
    return env
