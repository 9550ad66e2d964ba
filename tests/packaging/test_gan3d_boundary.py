"""The gan3d -> kit boundary (docs/architecture.md, "The gan3d ⇄ kit boundary"): gan3d, the
workload inside the image, imports only the kit modules that need nothing beyond the training
stack. Read from the source with ast (what each file imports, at any depth), so a new import of,
say, kit.slurm from gan3d fails here rather than in an image without Slurm's helpers."""

from __future__ import annotations

import ast
from pathlib import Path

import gan3d

ALLOWED = {
    "kit",
    "kit.atomic",
    "kit.cachedir",
    "kit.readfile",
    "kit.excerpt",
    "kit.boundedrun",
    "kit.errors",
    "kit.crash",
    "kit.extras",
    "kit.site",
    "kit.code_commit",
    "kit.scratch",
    "kit.schema",
    "kit.yamlbound",
}


def _kit_imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if (
            isinstance(node, ast.ImportFrom)
            and node.level == 0
            and node.module
            and node.module.split(".")[0] == "kit"
        ):
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "kit"}
    return found


def test_gan3d_imports_only_the_kit_modules_the_design_names():
    sources = sorted(Path(gan3d.__file__).parent.glob("*.py"))
    assert len(sources) > 10
    used = {module: path.name for path in sources for module in _kit_imports(path)}
    assert set(used) - ALLOWED == set(), {m: used[m] for m in set(used) - ALLOWED}
    assert {"kit.atomic", "kit.site", "kit"} <= set(
        used
    )  # the reader sees the imports (not an empty walk)
