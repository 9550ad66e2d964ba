"""The repository-wide signature audit: a public function of kit/ and gan3d/ takes at most three
positional parameters (`self`/`cls` not counted); the rest are keyword-only (after `*`).

A call then names what it passes (`make_plan(site, nodes, rpn, threads=..., walltime=...)`), so
an argument cannot land in the wrong slot when a parameter is added or reordered.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TREES = ("kit", "gan3d")
MOST = 3


def positional_heavy(source: str, most: int = MOST) -> list[tuple[int, str, int]]:
    """(line, qualified name, positional count) of each public function or method (nested ones
    too) with more than `most` positional parameters; a method's `self`/`cls` is not counted.
    """
    found: list[tuple[int, str, int]] = []

    def visit(node: ast.AST, prefix: str, in_class: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.", True)
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                params = [a.arg for a in child.args.posonlyargs + child.args.args]
                if in_class and params[:1] in (["self"], ["cls"]):
                    params = params[1:]
                name = f"{prefix}{child.name}"
                if not child.name.startswith("_") and len(params) > most:
                    found.append((child.lineno, name, len(params)))
                visit(child, f"{name}.", False)
            else:
                visit(child, prefix, in_class)

    visit(ast.parse(source), "", False)
    return found


def _audit(most: int = MOST) -> list[str]:
    """Each function of kit/ and gan3d/ over `most` positional parameters, as "path:line name (N
    positional)"."""
    offenders = []
    for tree in TREES:
        for path in sorted((REPO / tree).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            if rel.startswith("kit/_data/"):
                continue
            for line, name, count in positional_heavy(path.read_text(), most):
                offenders.append(f"{rel}:{line} {name} ({count} positional)")
    return offenders


def test_public_functions_take_at_most_three_positional_parameters():
    offenders = _audit()
    assert not offenders, (
        f"more than {MOST} positional parameters; put the rest after `*` (keyword-only) and name "
        "them at the call sites:\n" + "\n".join(offenders)
    )


def test_the_audit_reads_both_trees_and_their_subpackages():
    """A lower limit finds functions in kit/, its subpackages and gan3d/: a walk that reads no
    file, or only the top level, would pass the audit vacuously."""
    found = {f.split(":", 1)[0] for f in _audit(most=2)}
    assert {f.split("/", 1)[0] for f in found} == set(TREES)
    assert any(f.count("/") >= 2 for f in found)  # e.g. kit/scale/*.py


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("def f(a, b, c, d): pass", [(1, "f", 4)]),
        ("def f(a, b, c, *, d): pass", []),
        ("def f(a, b, /, c, d=1): pass", [(1, "f", 4)]),
        ("def f(a, b, c, *args, d): pass", []),
        ("def _f(a, b, c, d): pass", []),
        ("class C:\n    def m(self, a, b, c): pass", []),
        ("class C:\n    def m(self, a, b, c, d): pass", [(2, "C.m", 4)]),
        ("class C:\n    @classmethod\n    def m(cls, a, b, c, d=0): pass", [(3, "C.m", 4)]),
        ("def f(self, a, b, c): pass", [(1, "f", 4)]),  # outside a class `self` is a parameter
        ("def f():\n    def g(a, b, c, d): pass", [(2, "f.g", 4)]),
        ("async def f(a, b, c, d): pass", [(1, "f", 4)]),
    ],
)
def test_the_audit_counts_positional_parameters(source, expected):
    assert positional_heavy(source) == expected
