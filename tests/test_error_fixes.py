"""Every error the kit and gan3d raise for a user says what to do about it: each `raise` of
KitError (or a subclass) in kit/ and gan3d/ passes `fix=`, unless listed below with the reason it
has none. Read from the source with ast, so a new raise without its fix fails here, not in a
user's terminal."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from kit.errors import KitError
from kit.readfile import read_json, read_json_object
from kit.yamlbound import load_file
from tests.support.paths import REPO
from tests.support.sources import parsed

# (file, function): why its raises carry no fix=. Keep it short: a fix says what to do.
WITHOUT_FIX = {
    # a path inside an image root that cannot be used safely (a loop, a FIFO, a link in the
    # way): the image's callers skip it (kit.mpi.discover) or name the image around it
    ("kit/rootfs.py", "*"): "RootError: what is wrong inside the image; its caller adds the image",
    ("kit/mpi/discover.py", "_library"): "RootError: the library is skipped, the scan goes on",
    ("kit/image/layers.py", "_member_data"): "a guard: only a regular file's data is asked for",
    ("kit/study/evaluate.py", "read_objective"): "a failed evaluation, recorded in the ledger: "
    "the study goes on without it",
}


def kit_error_classes(trees: dict[Path, ast.Module]) -> set[str]:
    """KitError and the project's classes derived from it, at any depth (by name)."""
    found = {"KitError"}
    grew = True
    while grew:
        grew = False
        for tree in trees.values():
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef) and node.name not in found:
                    bases = {getattr(b, "id", getattr(b, "attr", None)) for b in node.bases}
                    if bases & found:
                        found.add(node.name)
                        grew = True
    return found


def raises_without_fix(
    trees: dict[Path, ast.Module], classes: set[str]
) -> list[tuple[str, str, int]]:
    """(file, enclosing function, line) of each `raise CLASS(...)` without a fix= keyword."""
    missing = []
    for path, tree in trees.items():
        for function, node in _raises(tree):
            call = node.exc
            if not isinstance(call, ast.Call):
                continue
            name = getattr(call.func, "id", getattr(call.func, "attr", None))
            if name in classes and not any(k.arg == "fix" for k in call.keywords):
                missing.append((path.relative_to(REPO).as_posix(), function, node.lineno))
    return missing


def _raises(tree: ast.Module):
    """(qualified name of the enclosing function, raise node) of every raise in ``tree``."""
    stack: list[tuple[ast.AST, str]] = [(tree, "")]
    while stack:
        node, scope = stack.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                stack.append((child, f"{scope}.{child.name}" if scope else child.name))
                continue
            if isinstance(child, ast.Raise) and child.exc is not None:
                yield scope or "<module>", child
            stack.append((child, scope))


def test_every_raise_of_a_kit_error_gives_its_fix_or_says_why_not():
    trees = parsed()
    classes = kit_error_classes(trees)
    assert {"KitError", "SiteError", "CheckpointError", "VclusterError"} <= classes
    missing = raises_without_fix(trees, classes)
    unlisted = [
        f"{file}:{line} ({function})"
        for file, function, line in missing
        if (file, function) not in WITHOUT_FIX and (file, "*") not in WITHOUT_FIX
    ]
    assert unlisted == [], "give these raises a fix= (what the user does), or list them"
    listed_but_fixed = (
        set(WITHOUT_FIX) - {(f, fn) for f, fn, _ in missing} - {(f, "*") for f, _, _ in missing}
    )
    assert listed_but_fixed == set(), "these have their fix now: drop them from WITHOUT_FIX"


def test_the_walk_finds_a_raise_without_a_fix_and_passes_one_with():
    source = """
class Own(KitError):
    pass

def read(path):
    if path:
        raise Own(f"{path}: bad", where=path)
    raise KitError("bad", fix="give a good one")

class Reader:
    def check(self):
        raise ValueError("not a KitError")
"""
    trees = {REPO / "kit/x.py": ast.parse(source)}
    classes = kit_error_classes(trees)
    assert classes == {"KitError", "Own"}
    assert raises_without_fix(trees, classes) == [("kit/x.py", "read", 7)]


def test_the_readers_give_the_callers_fix_and_the_file_and_line_as_parts(tmp_path):
    """A reader's refusal carries the caller's fix and the file (and line) apart from what went
    wrong: --json prints them as they are, never read back out of one string."""
    bad_json, array, bad_yaml = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "c.yaml"
    bad_json.write_text('{\n  "a": 1,\n  "b": \n')
    array.write_text("[1]\n")
    bad_yaml.write_text("a: 1\nb: [\n")
    cases = [
        (lambda: read_json(bad_json, "results file", "re-run the job"), f"{bad_json}:4"),
        (lambda: read_json_object(array, "results file", "re-run the job"), str(array)),
        (lambda: load_file(bad_yaml, "plan", "re-run the job"), f"{bad_yaml}:3"),
    ]
    for read, where in cases:
        with pytest.raises(KitError) as caught:
            read()
        assert (caught.value.fix, caught.value.where) == ("re-run the job", where)
        assert "fix" not in caught.value.what and where not in caught.value.what
