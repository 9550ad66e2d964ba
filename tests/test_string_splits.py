"""Strings split mid-phrase, kept out: a message written as "the key " "`nodes` must be a list"
over two lines is not found by a grep for "the key `nodes` must". The repository keeps the rule of
scripts/string_splits.py, and its rewrite changes no value and leaves the rule kept."""

from __future__ import annotations

import ast
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
from hypothesis import given
from hypothesis import strategies as st

from scripts import string_splits as ss
from tests.support.paths import REPO

RUFF = Path(sys.executable).with_name("ruff")  # the test extra's


def _offences(source: str) -> list[str]:
    return [o.what for g in ss.groups(source) for o in ss.offences(g)]


def _fixed(source: str) -> str:
    """The rewrite of `source`, with what it must prove: the same AST, the rule kept, nothing
    refused, and nothing more to do on a second run."""
    new, refused = ss.fix_source(source)
    assert refused == []
    assert ast.dump(ast.parse(new)) == ast.dump(ast.parse(source))
    assert _offences(new) == [], new
    assert ss.fix_source(new) == (new, [])
    if _offences(source):  # rewritten: every piece within E501's limit (a comment may pass it)
        assert max(len(line.split("  # ")[0]) for line in new.splitlines()) <= ss.LIMIT
    return new


def test_the_repository_splits_strings_only_between_phrases():
    found = [
        f"{path.relative_to(REPO)}:{offence.line}: {offence.what}"
        for path, offence in ss.check([REPO / tree for tree in ss.TREES]).offences
    ]
    assert found == [], "fix: scripts/lint.sh --fix\n" + "\n".join(found)


def test_the_widths_are_the_formatters():
    ruff = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["ruff"]
    assert ss.WIDTH == ruff["line-length"]
    assert ss.LIMIT == ruff["lint"]["pycodestyle"]["max-line-length"]


def test_the_check_finds_a_split_inside_a_phrase_and_a_concatenation_that_fits():
    split = (
        'raise E(\n    f"cannot read {p}: the key "\n    "`nodes` must be a list of hosts",\n)\n'
    )
    assert _offences(split) == ["fits on one line: one literal"]
    long = split.replace("hosts", "hosts; " + "and more words " * 5)
    assert _offences(long) == [
        "split mid-phrase: 'cannot read {p}: the key ' | '`nodes` must be a list of host'"
    ]
    at_phrase = long.replace('the key "\n    "`nodes`', 'the key `nodes`; "\n    "it')
    assert _offences(at_phrase) == []


def test_a_phrase_wider_than_its_line_may_split_between_words_but_not_inside_one():
    phrase = "word " * 30  # no phrase boundary: only a space can end a piece
    between = f'x = (\n    "{phrase[:90]}"\n    "{phrase[90:]}"\n)\n'
    inside = f'x = (\n    "{phrase[:92]}"\n    "{phrase[92:]}"\n)\n'
    assert _offences(between) == []
    assert len(_offences(inside)) == 1
    assert _fixed(inside).splitlines()[1].endswith('word "')


@pytest.mark.parametrize(
    "source, kept",
    [
        pytest.param(  # `{{` stays doubled in the f-string; `{` of the plain piece is doubled
            # once it shares a piece with a field
            'x = (\n    f"set {{a}} for {name!r:>{width}} in {d[\'k\']}: the value "\n'
            '    "{b} must be a list of things, " "which goes on past the width of a line for long"\n)\n',
            [
                "f\"set {{a}} for {name!r:>{width}} in {d['k']}: the value {{b}} must be a list",
                "which goes on",
            ],
            id="f-string with fields and braces",
        ),
        pytest.param(
            'P = re.compile(\n    r"^the key \\d+ \\(at \\S+\\) must "\n    r"be a list\\.$"\n)\n',
            ['r"^the key \\d+ \\(at \\S+\\) must be a list\\.$"'],
            id="raw string",
        ),
        pytest.param(
            'x = (\n    f"{n} ranks on {m} nodes is more than the site holds, and the plan "\n'
            '    "leaves it out; fix: lower --nodes or the ranks per node in the plan at"\n'
            '    f" {path}"\n)\n',
            [
                "the plan leaves it out",
                'f"lower --nodes or the ranks per node in the plan at {path}"',
            ],
            id="mixed f and plain pieces",
        ),
        pytest.param(
            'x = (\n    "the key "  # why it is one\n    "`nodes` must be a list"\n)\n',
            ['"the key `nodes` must be a list"  # why it is one'],
            id="comment between pieces",
        ),
        pytest.param(
            'x = (\n    "a short phrase "\n    "split here; --' + "x" * 120 + ' and more"\n)\n',
            ['"a short phrase split here; "', ' and more"'],
            id="a word longer than a line",
        ),
        pytest.param(
            'f(\n    help="a phrase with no boundary that goes on and on and on and on and on and '
            'on and on and o"\n    "n and on to the end of it",\n)\n',
            ['and on "\n', "on to the end of it"],
            id="a phrase longer than a line",
        ),
    ],
)
def test_the_rewrite_keeps_every_value_and_then_keeps_the_rule(source, kept):
    assert _offences(source) != []
    new = _fixed(source)
    for text in kept:
        assert text in new
    formatted = subprocess.run(
        [RUFF, "format", "--config", REPO / "pyproject.toml", "--stdin-filename", "t.py", "-"],
        input=new,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert _offences(formatted) == [], formatted  # the formatter does not undo it


def test_a_rewrite_that_would_change_a_value_leaves_the_file_as_it_is(tmp_path, monkeypatch):
    path = tmp_path / "m.py"
    source = 'x = (\n    "the key "\n    "`nodes` must be a list"\n)\n'
    path.write_text(source)
    path.chmod(0o750)
    monkeypatch.setattr(ss, "rewritten", lambda group: ('"the key nodes"', 0))
    assert ss.main(["--fix", str(path)]) == 1
    assert path.read_text() == source
    monkeypatch.undo()
    assert ss.main(["--fix", str(path)]) == 0
    assert path.read_text() == 'x = (\n    "the key `nodes` must be a list"\n)\n'
    assert stat.S_IMODE(path.stat().st_mode) == 0o750


# Segments of generated text: (as a plain literal writes it, as an f-string writes it); None: a
# field. In a piece, Q is the quote that is not the piece's (bare) and q its own (escaped).
_WORD = st.text("abcxyz`-/Q", min_size=1, max_size=14).map(lambda w: (w, w))
_LONG = st.integers(20, 120).map(lambda n: ("w" * n, "w" * n))
_MARKS = st.sampled_from(
    [(s, s) for s in (" ", " ", " ", ". ", ", ", "; ", ": ", ") ", "(", "| ", "—", "\\n", "\\q")]
    + [("{", "{{"), ("}", "}}"), ("e.g. ", "e.g. "), ("\\N{EM DASH}", "\\N{EM DASH}")]
)
_FIELDS = st.sampled_from([(None, "{x}"), (None, "{y!r:>{w}}"), (None, "{d[QkQ]}")])
_SEGMENTS = st.lists(
    st.one_of(_WORD, _WORD, _MARKS, _MARKS, _FIELDS, _LONG), min_size=2, max_size=40
)
_LAYOUTS = [("x = (\n    {}\n)\n", 4), ("f(\n    m={},\n)\n", 4), ("f(\n        {}\n)\n", 8)]


@given(
    segments=_SEGMENTS,
    cuts=st.lists(st.integers(1, 39), min_size=1, max_size=8, unique=True),
    quotes=st.lists(st.sampled_from("'\""), min_size=9, max_size=9),
    raw=st.booleans(),
    comment=st.booleans(),
    layout=st.sampled_from(_LAYOUTS),
)
def test_the_rewrite_of_any_text_keeps_its_value_and_the_rule(
    segments, cuts, quotes, raw, comment, layout
):
    bounds = [0, *sorted(c for c in cuts if c < len(segments)), len(segments)]
    pieces = []
    for (start, end), quote in zip(zip(bounds, bounds[1:]), quotes):
        part = segments[start:end]
        fstring = any(plain is None for plain, _ in part)
        body = "".join(f if fstring else p for p, f in part)
        other = "'" if quote == '"' else '"'
        body = body.replace("\\q", "\\" + quote).replace("Q", other)
        if raw:  # where \N{...} is a backslash, an N and a field
            body = body.replace("\\N{EM DASH}", "—")
        pieces.append(("r" if raw else "") + ("f" if fstring else "") + quote + body + quote)
    if comment and len(pieces) > 1:
        pieces[0] += "  # a note"
    template, indent = layout
    _fixed(template.format(("\n" + " " * indent).join(pieces)))
