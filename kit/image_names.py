"""Image file names: which suffixes are images, and the name an image is installed under.

Shared by the converter's pair (where the image will live on the site) and by transfer
(versions are NAME@<sha>, current is NAME.current); kept free of heavy imports.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

from kit.errors import KitError

TAR_GZ, TAR, SQUASH = (".tar.gz", ".tgz"), (".tar",), (".sqfs", ".squashfs", ".squash")
SUFFIXES = TAR_GZ + SQUASH + TAR  # what kit image convert writes and kit transfer moves
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*\Z")  # \Z: also safe under .match()


def stem(name: str) -> str:
    """gan3d for gan3d.tar.gz / gan3d.sqfs / gan3d.tar."""
    for suffix in SUFFIXES:
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    raise KitError(f"{name}: not an image file; expected one of {', '.join(SUFFIXES)} "
                   "(as written by kit image convert)")


def image_name(text: str) -> str:
    """The installed name of an image given as NAME, an image file name or its path."""
    name = stem(Path(text).name) if text.endswith(SUFFIXES) else text
    if not NAME_RE.fullmatch(name):
        raise KitError(f"image name {text!r}: give the image's name (gan3d for gan3d.sqfs): letters, "
                       "digits and . _ + -, not starting with a dot")
    return name


def pair_path(image: str | os.PathLike) -> Path:
    """IMAGE.pair.yaml, beside IMAGE."""
    image = Path(image)
    return image.with_name(image.name.rstrip("/") + ".pair.yaml")
