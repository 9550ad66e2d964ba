"""The repository-wide signature audit: a public function of kit/ and gan3d/ takes at most three
positional parameters (`self`/`cls` not counted); the rest are keyword-only (after `*`).

A call then names what it passes (`make_plan(site, nodes, rpn, threads=..., walltime=...)`), so
an argument cannot land in the wrong slot when a parameter is added or reordered.
"""

from __future__ import annotations

import ast

import pytest

from tests.support.paths import REPO
from tests.support.sources import TREES, parsed

MOST = 3


def positional_heavy(source: str | ast.Module, most: int = MOST) -> list[tuple[int, str, int]]:
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

    visit(ast.parse(source) if isinstance(source, str) else source, "", False)
    return found


def _audit(most: int = MOST) -> list[str]:
    """Each function of kit/ and gan3d/ over `most` positional parameters, as "path:line name (N
    positional)"."""
    return [
        f"{path.relative_to(REPO).as_posix()}:{line} {name} ({count} positional)"
        for path, tree in parsed().items()
        for line, name, count in positional_heavy(tree, most)
    ]


def test_public_functions_take_at_most_three_positional_parameters():
    offenders = _audit()
    assert not offenders, (
        f"more than {MOST} positional parameters; put the rest after `*` (keyword-only) "
        "and name them at the call sites:\n" + "\n".join(offenders)
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


# --- records by name: a dataclass built with many values names each field -------------------

MOST_FIELDS = 4  # `Point(x, y)` reads well; past four, a swapped pair of values goes unseen


def dataclass_names(trees: list[ast.Module]) -> set[str]:
    """The names of the classes defined with @dataclass (or @dataclass(...)) in ``trees``."""
    return {name for tree in trees for name in dataclass_names_of(tree)}


def dataclass_names_of(tree: ast.AST) -> set[str]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for deco in node.decorator_list:
                func = deco.func if isinstance(deco, ast.Call) else deco
                if getattr(func, "id", getattr(func, "attr", None)) == "dataclass":
                    found.add(node.name)
    return found


def positional_records(
    source: str | ast.Module, records: set[str], most: int = MOST_FIELDS
) -> list[tuple[int, str, int]]:
    """(line, class, positional count) of each call of a record class (by name, or as
    `module.Name`) with more than `most` positional arguments; a name this source imports from
    outside the project (rich's Progress) or defines as a plain class is not the project's."""
    tree = ast.parse(source) if isinstance(source, str) else source
    foreign = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        and (node.level or node.module or "").split(".")[0] not in TREES
        for alias in node.names
    } | {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef) and node.name not in dataclass_names_of(node)
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and len(node.args) > most:
            name = getattr(node.func, "id", getattr(node.func, "attr", None))
            if name in records - foreign:
                found.append((node.lineno, name, len(node.args)))
    return found


def test_a_record_of_more_than_four_fields_is_built_with_their_names():
    files = {path.relative_to(REPO).as_posix(): tree for path, tree in parsed().items()}
    records = dataclass_names(list(files.values()))
    assert {"Site", "Forecast", "Row", "Fit"} <= records  # the walk found the project's records
    offenders = [
        f"{rel}:{line} {name}({count} positional)"
        for rel, source in files.items()
        if not rel.startswith(OWNED_ELSEWHERE)
        for line, name, count in positional_records(source, records)
    ]
    assert not offenders, (
        f"a record built from more than {MOST_FIELDS} positional values: "
        "name each field (Row(nodes=..., seconds=...)), or dataclasses.replace(old, changed=...):\n"
        + "\n".join(offenders)
    )


# kit/transfer/ and the SIF writer are being reworked elsewhere this round
OWNED_ELSEWHERE = ("kit/transfer/", "kit/image/sif.py")


def test_the_record_walk_counts_positional_values_of_dataclasses_only():
    source = (
        "from dataclasses import dataclass\n"
        "@dataclass(frozen=True)\nclass R:\n    a: int\n"
        "@dataclass\nclass S:\n    a: int\n"
        "class T:\n    pass\n"
        "R(1, 2, 3, 4, 5)\nmod.S(1, 2, 3, 4, 5, 6)\nT(1, 2, 3, 4, 5)\nR(1, 2, 3, 4, e=5)\n"
    )
    records = dataclass_names([ast.parse(source)])
    assert records == {"R", "S"}
    assert positional_records(source, records) == [(10, "R", 5), (11, "S", 6)]
    # a name of the project's records imported from elsewhere is another class
    elsewhere = "from rich.progress import R\nR(1, 2, 3, 4, 5)\n"
    assert positional_records(elsewhere, records) == []
    assert positional_records("from kit.x import R\nR(1, 2, 3, 4, 5)\n", records) == [(2, "R", 5)]
