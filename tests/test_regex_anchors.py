"""The repository-wide regex audit, kept: no pattern in the kit's code ends a match with `$`.

`$` also matches before a trailing newline, so `re.match(r"^[a-z]+$", "ok\\n")` passes a value
that ends an #SBATCH line early or splits a log line. Whole values are matched with fullmatch or
`\\Z`; `$` stays legal only in MULTILINE patterns, where end-of-line is what is meant.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TREES = ("kit", "gan3d", "scripts", "slurm", "bench")
RE_CALLS = {
    "compile",
    "match",
    "search",
    "fullmatch",
    "findall",
    "finditer",
    "sub",
    "subn",
    "split",
}


def _sources() -> list[Path]:
    return sorted(p for tree in TREES for p in (REPO / tree).rglob("*.py"))


def _multiline(call: ast.Call) -> bool:
    flags = [k.value for k in call.keywords if k.arg == "flags"] + call.args[1:]
    return any(
        isinstance(n, ast.Attribute) and n.attr in ("M", "MULTILINE")
        for f in flags
        for n in ast.walk(f)
    )


def dollar_anchored(source: str) -> list[tuple[int, str]]:
    """(line, pattern) of each re.* call whose literal pattern uses an unescaped `$` outside
    MULTILINE.
    """
    found = []
    for call in ast.walk(ast.parse(source)):
        if not (
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Attribute)
            and call.func.attr in RE_CALLS
            and isinstance(call.func.value, ast.Name)
            and call.func.value.id == "re"
            and call.args
        ):
            continue
        pattern = call.args[0]
        if not (isinstance(pattern, ast.Constant) and isinstance(pattern.value, (str, bytes))):
            continue
        text = pattern.value if isinstance(pattern.value, str) else pattern.value.decode("latin-1")
        if re.search(r"(?<!\\)(?:\\\\)*\$", text) and not _multiline(call) and "(?m)" not in text:
            found.append((call.lineno, text))
    return found


def test_the_scanner_finds_what_it_is_for():
    assert dollar_anchored('import re\nNAME = re.compile(r"^[a-z]+$")\n') == [(2, "^[a-z]+$")]
    assert dollar_anchored('import re\nre.match(r"x\\$", s)\n') == []  # an escaped, literal dollar
    assert dollar_anchored('import re\nre.match(r"x\\\\$", s)\n') == [
        (2, "x\\\\$")
    ]  # a backslash, then the end
    assert dollar_anchored('import re\nre.findall(r"^(\\w+)$", t, re.M)\n') == []
    assert dollar_anchored('import re\nre.compile(r"[a-z]+\\Z")\n') == []


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(REPO)))
def test_no_validation_pattern_is_dollar_anchored(path):
    assert dollar_anchored(path.read_text()) == [], (
        f"{path}: use re.fullmatch or end the pattern with \\Z (`$` admits a trailing newline)"
    )
