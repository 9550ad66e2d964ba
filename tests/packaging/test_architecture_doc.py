"""docs/architecture.md says where things live: every package and module of kit/ and gan3d/ is
named there, so that a new module cannot arrive without its line."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"


def _modules() -> list[Path]:
    found = [p for top in ("kit", "gan3d") for p in sorted((ROOT / top).rglob("*.py"))]
    return [
        p.relative_to(ROOT)
        for p in found
        if "_data" not in p.parts and "__pycache__" not in p.parts
    ]


def unnamed(doc: str, modules: list[Path]) -> list[str]:
    """Modules the doc does not name: by their path, or by their file name on a line (a table row)
    that names their package. A package is named by its directory (`kit/mpi/`)."""
    lines = doc.splitlines()
    missing = []
    for module in modules:
        package = f"`{module.parent.as_posix()}/`"
        if module.name in ("__init__.py", "__main__.py"):
            if len(module.parts) > 1 and package not in doc and module.parent.as_posix() != "kit":
                missing.append(package)
            continue
        if f"`{module.as_posix()}`" in doc:
            continue
        if not any(package in line and f"`{module.name}`" in line for line in lines):
            missing.append(module.as_posix())
    return sorted(set(missing))


def test_every_kit_and_gan3d_module_is_named_in_the_architecture_doc():
    modules = _modules()
    assert len(modules) > 100  # the tree was found
    assert unnamed(DOC.read_text(), modules) == []


def test_a_module_or_package_the_doc_does_not_name_is_reported():
    modules = [
        Path("kit/mpi/check.py"),
        Path("kit/newpkg/__init__.py"),
        Path("kit/newpkg/thing.py"),
        Path("kit/mpi/other.py"),
    ]
    doc = "| MPI pairs | `kit/mpi/` | proves it (`check.py`) |\n`other.py` on a line without its package\n"
    assert unnamed(doc, modules) == ["`kit/newpkg/`", "kit/mpi/other.py", "kit/newpkg/thing.py"]
