"""bench/ and scripts/ run by hand, outside the suite: a name they import from the kit or gan3d that
a change moved would break them silently (bench/transfer_push.py imported sha256_file from a module
that no longer had it). Checked from the sources, without importing TensorFlow."""

from __future__ import annotations

import ast
import importlib

import pytest

from tests.support.paths import REPO
from tests.support.sources import module_name, parsed

TOPS = {"kit", "gan3d"}
SCRIPTS = sorted([*(REPO / "bench").glob("*.py"), *(REPO / "scripts").glob("*.py")])


def _bound(tree: ast.Module) -> set[str]:
    """Names a module binds at its top level (in if/try blocks too, not inside functions)."""
    names: set[str] = set()
    todo: list[ast.stmt] = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            todo += [s for part in ("body", "orelse", "finalbody") for s in getattr(node, part, [])]
            todo += [s for h in getattr(node, "handlers", []) for s in h.body]
    return names


def _lazy(module: str, bound: set[str], name: str) -> bool:
    """A name a package hands out on first use (PEP 562's module __getattr__, as kit.mpi's)."""
    return "__getattr__" in bound and hasattr(importlib.import_module(module), name)


def missing_names(script: ast.Module, modules: dict[str, ast.Module]) -> list[str]:
    """`module.name` of each name SCRIPT imports from a kit/gan3d module that does not bind it."""
    missing = []
    for node in ast.walk(script):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in TOPS:
            if node.module not in modules:
                missing.append(f"{node.module} (no such module)")
                continue
            bound = _bound(modules[node.module])
            submodules = {m.rsplit(".", 1)[1] for m in modules if m.startswith(node.module + ".")}
            missing += [
                f"{node.module}.{a.name}"
                for a in node.names
                if a.name not in bound | submodules and not _lazy(node.module, bound, a.name)
            ]
    return missing


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.relative_to(REPO).as_posix())
def test_what_a_bench_or_script_imports_from_the_kit_exists(path):
    modules = {module_name(p): tree for p, tree in parsed().items()}
    assert missing_names(ast.parse(path.read_text()), modules) == []


def test_the_check_finds_a_name_a_module_lost():
    modules = {module_name(p): tree for p, tree in parsed().items()}
    old = ast.parse("from kit.transfer.local_image import sha256_file\n")
    assert missing_names(old, modules) == ["kit.transfer.local_image.sha256_file"]
    assert missing_names(ast.parse("from kit.image_names import sha256_file\n"), modules) == []
