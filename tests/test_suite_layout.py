"""How the test suite shares code: helpers are modules of tests/support/, fixtures several areas use
are registered once by tests/conftest.py's pytest_plugins, and no file imports a conftest.py or a
test_*.py. A test module imported by another is collected twice over and its fixtures become
separate copies (a session fixture is made once per importing directory); a name imported from it
is shadowed by the test parameter of the same name."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
ROOT_CONFTEST = TESTS / "conftest.py"


def _is_test_module(name: str) -> bool:
    """Whether the dotted module name ends in a conftest or a test_* module."""
    last = name.rsplit(".", 1)[-1]
    return last == "conftest" or last.startswith("test_")


def forbidden_imports(source: str) -> list[str]:
    """The imports (at any depth: a function's own included) of a conftest or test_* module, in
    every spelling: `import tests.a.conftest`, `from tests.a.test_b import x`, `from tests.a import
    conftest`, `from .conftest import x`, `from . import test_b`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [f"import {a.name}" for a in node.names if _is_test_module(a.name)]
        elif isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            if node.module and _is_test_module(node.module):
                found.append(f"from {module} import ...")
            elif (node.module or "").split(".")[0] in ("", "tests") or node.level:
                found += [
                    f"from {module} import {a.name}" for a in node.names if _is_test_module(a.name)
                ]
    return found


def _python_files() -> list[Path]:
    """The test suite's files and the benchmarks', which reuse its parts."""
    tests = [p for p in TESTS.rglob("*.py") if "corpus" not in p.relative_to(TESTS).parts]
    return sorted([*tests, *(TESTS.parent / "bench").rglob("*.py")])


@pytest.mark.parametrize(
    "source, expected",
    [
        ("from tests.mpi.conftest import TARGET", ["from tests.mpi.conftest import ..."]),
        ("import tests.slurm.conftest", ["import tests.slurm.conftest"]),
        ("def f():\n    from tests.a.test_b import x", ["from tests.a.test_b import ..."]),
        ("from tests.image import test_build", ["from tests.image import test_build"]),
        ("from .conftest import x", ["from .conftest import ..."]),
        ("from . import test_b", ["from . import test_b"]),
        ("from tests.support.sites import write_site", []),
        ("from kit.study import test_like_name", []),  # the kit's own modules are not the tests'
        ("import pytest\nfrom tests.mpi.hostile import mpich_tree", []),
    ],
    ids=[
        "from-conftest",
        "import-conftest",
        "in-a-function",
        "module-as-name",
        "relative",
        "relative-module",
        "support",
        "kit-module",
        "area-helper",
    ],
)
def test_the_check_finds_every_spelling_of_such_an_import(source, expected):
    assert forbidden_imports(source) == expected


def test_no_test_or_benchmark_imports_a_conftest_or_a_test_module():
    found = [
        f"{path.relative_to(TESTS.parent)}: {line}"
        for path in _python_files()
        for line in forbidden_imports(path.read_text())
    ]
    assert not found, (
        "move what is shared into tests/support/ (fixtures: *_fixtures.py):\n" + "\n".join(found)
    )


def _plugins(conftest: Path) -> list[str] | None:
    """The module-level pytest_plugins of a conftest.py (None: it sets none)."""
    for node in ast.parse(conftest.read_text()).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "pytest_plugins" for t in node.targets
        ):
            return [ast.literal_eval(e) for e in node.value.elts]  # type: ignore[attr-defined]
    return None


def test_shared_fixtures_are_registered_once_from_the_root_conftest():
    """pytest honours pytest_plugins only in the rootdir's conftest.py; every fixtures module of
    tests/support/ is listed there, and tests/support/ defines fixtures nowhere else."""
    assert all(_plugins(c) is None for c in TESTS.rglob("conftest.py") if c != ROOT_CONFTEST)
    listed = set(_plugins(ROOT_CONFTEST) or ())
    modules = {
        f"tests.support.{p.stem}"
        for p in (TESTS / "support").glob("*.py")
        if p.stem.endswith("_fixtures")
    }
    assert listed == modules
    for path in (TESTS / "support").glob("*.py"):
        if path.stem.endswith("_fixtures"):
            continue
        fixtures = [
            node.name
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.FunctionDef)
            and any("fixture" in ast.unparse(d) for d in node.decorator_list)
        ]
        assert not fixtures, (
            f"{path.name} defines fixtures {fixtures}: move them to a *_fixtures.py"
        )
