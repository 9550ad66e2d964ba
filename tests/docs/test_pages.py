"""The README and the pages under docs/ as a reader meets them: a README short enough to read,
each reader's first command on its first screen, an index that reaches every page, and no link
that leads nowhere (relative links and #anchors, checked offline)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.paths import REPO

README = REPO / "README.md"
DOCS = REPO / "docs"
INDEX = DOCS / "index.md"
MAX_LINES, MAX_WIDTH, FIRST_SCREEN = 120, 200, 40
# The three "Pick your path" blocks, found by a word of their heading.
READERS = ("laptop", "air-gapped", "scaling")
FENCE = re.compile(r"^\s*(```|~~~)")
LINK = re.compile(r"\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
CODE_SPAN = re.compile(r"(`+).*?\1")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def prose_lines(text: str, *, code: bool = False) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks; inline code spans blanked unless ``code``:
    a link shown as an example is no link, but a heading's anchor keeps the code's words."""
    out, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append((number, line if code else CODE_SPAN.sub("", line)))
    return out


def links(path: Path) -> list[tuple[int, str]]:
    """(line number, target) of every markdown link and image in the page's prose."""
    return [(n, m[1]) for n, line in prose_lines(path.read_text()) for m in LINK.finditer(line)]


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: link text kept, code marks and punctuation dropped,
    lower case, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading's anchor in a page, repeats numbered as GitHub numbers them (-1, -2, ...)."""
    seen: dict[str, int] = {}
    out = set()
    for _n, line in prose_lines(path.read_text(), code=True):
        if match := HEADING.match(line):
            base = slug(match[2])
            count = seen.get(base, 0)
            seen[base] = count + 1
            out.add(base if count == 0 else f"{base}-{count}")
    return out


def is_relative(target: str) -> bool:
    return not re.match(r"[a-z][a-z0-9+.-]*:", target, re.I)


def broken(page: Path, target: str) -> str | None:
    """Why a relative link from ``page`` leads nowhere, or None."""
    name, _, anchor = target.partition("#")
    dest = (page.parent / name).resolve() if name else page
    if not dest.exists():
        return f"{name}: no such file"
    if anchor and dest.suffix == ".md" and anchor not in anchors(dest):
        return f"#{anchor}: no such heading in {name or page.name}"
    return None


def first_commands() -> dict[str, tuple[int, str]]:
    """For each "Pick your path" block: (line number, text) of the first command in its first
    code block."""
    lines = README.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("## Pick your path"))
    found: dict[str, tuple[int, str]] = {}
    reader, fenced = None, False
    for number, line in enumerate(lines[start + 1 :], start + 2):
        if line.startswith("## "):
            break
        if line.startswith("### "):
            reader = next((r for r in READERS if r in line.lower()), None)
        elif FENCE.match(line):
            fenced = not fenced
        elif fenced and reader and reader not in found and line.strip():
            if not line.lstrip().startswith("#"):
                found[reader] = (number, line.strip())
    return found


def test_the_readme_is_short_and_no_line_is_too_wide():
    lines = README.read_text().splitlines()
    assert len(lines) <= MAX_LINES, f"README.md has {len(lines)} lines; keep it to {MAX_LINES}"
    wide = [n for n, line in enumerate(lines, 1) if len(line) > MAX_WIDTH]
    assert not wide, f"README.md lines over {MAX_WIDTH} characters: {wide}"


def test_each_reader_meets_a_first_command_on_the_first_screen():
    found = first_commands()
    assert sorted(found) == sorted(READERS), f"Pick your path blocks found: {found}"
    late = {r: c for r, c in found.items() if c[0] > FIRST_SCREEN}
    assert not late, f"first commands after README.md line {FIRST_SCREEN}: {late}"


def test_the_index_lists_every_page():
    """Every page under docs/, except the example report's own outputs below its README."""
    reports = DOCS / "example-report"
    wanted = {
        p for p in pages() if p != INDEX and not (p.is_relative_to(reports) and p.parent != reports)
    }
    listed = {(DOCS / target.partition("#")[0]).resolve() for _n, target in links(INDEX)}
    missing = sorted(str(p.relative_to(DOCS)) for p in wanted - listed)
    assert not missing, f"docs/index.md does not list: {missing}"


@pytest.mark.parametrize("page", [README, *pages()], ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(page):
    bad = [
        f"{page.relative_to(REPO)}:{n}: {why}"
        for n, target in links(page)
        if is_relative(target) and (why := broken(page, target))
    ]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize(
    "heading, anchor",
    [
        ("What `kit mpi check` judges", "what-kit-mpi-check-judges"),
        ("ch-run --join peer groups", "ch-run---join-peer-groups"),
        (
            "gan3d: Intel Extension for TensorFlow (ITEX)",
            "gan3d-intel-extension-for-tensorflow-itex",
        ),
        ("1. Read the exit code", "1-read-the-exit-code"),
        ("See [the index](index.md)", "see-the-index"),
    ],
)
def test_anchors_are_the_ones_github_makes(heading, anchor):
    assert slug(heading) == anchor


def test_a_link_to_a_missing_file_or_heading_is_found(tmp_path):
    page = tmp_path / "page.md"
    (tmp_path / "other.md").write_text("# Other\n\n## A part\n")
    page.write_text(
        "[ok](other.md#a-part) [gone](nothing.md) [no part](other.md#b-part)\n"
        "`[code](nothing.md)`\n```\n[fenced](nothing.md)\n```\n[web](https://example.org/x)\n"
    )
    found = [(n, t, broken(page, t) if is_relative(t) else None) for n, t in links(page)]
    assert found == [
        (1, "other.md#a-part", None),
        (1, "nothing.md", "nothing.md: no such file"),
        (1, "other.md#b-part", "#b-part: no such heading in other.md"),
        (6, "https://example.org/x", None),
    ]
