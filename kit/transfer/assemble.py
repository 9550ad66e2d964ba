"""The script a site runs (remote_script.py), whole: each top-level `from kit.M import ...` line in
it is replaced by M's own text, so a rule the kit and the site share is written once
(kit.archive_rules). The site's python3 (>= 3.6) has the standard library alone, and so must the
modules inlined."""

from __future__ import annotations

import ast
import collections
import functools
import importlib.util
from pathlib import Path

SCRIPT = "kit.transfer.remote_script"


def _bound(tree: ast.Module) -> list[str]:
    """The names the module's own top-level statements bind (not its imports), once per binding."""
    names: list[str] = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names += [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
    return names


def _origin(name: str, where: str) -> Path:
    """The installed module's file, wherever the kit is installed."""
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        raise RuntimeError(f"{where}: no module {name} to inline")
    return Path(spec.origin)


def _expand(path: Path, within: tuple[str, ...], done: set[str]) -> str:
    """PATH's text, each kit import in place replaced by the module's expanded text the first time
    the script meets it (later imports of it find its names already bound)."""
    source = path.read_text(encoding="utf-8")
    lines = source.splitlines(keepends=True)
    pieces, pos = [], 0
    for node in ast.parse(source, str(path)).body:
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level:
            raise RuntimeError(f"{path.name}:{node.lineno}: a relative import cannot be inlined")
        name = node.module or ""
        if name.split(".")[0] != "kit":
            continue
        if name in within:
            raise RuntimeError(f"{path.name}:{node.lineno}: {name} imports itself (a cycle)")
        pieces.append("".join(lines[pos : node.lineno - 1]))
        if name not in done:
            done.add(name)
            module = _origin(name, f"{path.name}:{node.lineno}")
            pieces.append(_expand(module, (*within, name), done).rstrip("\n") + "\n")
        pos = node.end_lineno or node.lineno
    pieces.append("".join(lines[pos:]))
    return "".join(pieces)


def inline(path: Path) -> str:
    """PATH's text with its kit imports replaced by the modules' texts (theirs inlined too).

    A name bound twice at the top of the whole would silently replace the first: refused, as is
    an import cycle or a relative import (no file to read for it)."""
    text = _expand(path, (), set())
    twice = sorted(n for n, k in collections.Counter(_bound(ast.parse(text))).items() if k > 1)
    if twice:
        raise RuntimeError(
            f"{path.name}, with the modules it imports inlined, binds {', '.join(twice)} twice: "
            "rename one (the later text would replace the earlier)"
        )
    return text


@functools.cache
def script() -> bytes:
    """The text remote.py sends: read once per process."""
    return inline(_origin(SCRIPT, "kit.transfer.assemble")).encode("utf-8")
