"""The kit's and gan3d's modules parsed once per test process: the source audits (signatures,
error fixes, environment reads) walk the same trees, and parsing them is most of their time."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

from tests.support.paths import REPO

TREES = ("kit", "gan3d")


@functools.cache
def parsed() -> dict[Path, ast.Module]:
    """{file: its parsed module} of every module of kit/ and gan3d/ (not kit/_data/)."""
    files = [p for top in TREES for p in sorted((REPO / top).rglob("*.py"))]
    return {p: ast.parse(p.read_text(), str(p)) for p in files if "_data" not in p.parts}


def module_name(path: Path) -> str:
    """kit/site/__init__.py -> kit.site, gan3d/train.py -> gan3d.train."""
    return ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
