"""KitError carries what went wrong, where and the fix; the command line prints them as one line, and
with --debug the traceback of where it was raised too."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kit import cli
from kit.errors import KitError

PART = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=60).filter(
    lambda t: "; fix: " not in t
)


@given(what=PART, fix=PART)
def test_the_parts_and_the_one_string_form_are_the_same_error(what, fix):
    parts, line = KitError(what, fix=fix), KitError(f"{what}; fix: {fix}")
    assert (parts.what, parts.fix) == (line.what, line.fix) == (what, fix)
    assert str(parts) == str(line) == f"{what}; fix: {fix}"


def test_where_leads_the_line_and_a_message_without_a_fix_has_none():
    error = KitError(
        "key 'nodes' is -1, expected 1..16", fix="give a positive node count", where="plan.yaml:3"
    )
    assert (
        str(error)
        == "plan.yaml:3: key 'nodes' is -1, expected 1..16; fix: give a positive node count"
    )
    assert KitError("no such file").fix is None and str(KitError("no such file")) == "no such file"


def _bad_site(tmp_path):
    path = tmp_path / "site.yaml"
    path.write_text("name: x\nscheduler: 3\n")
    return path


def test_debug_shows_where_an_expected_error_was_raised(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("KIT_DEBUG", raising=False)
    assert cli.main(["site", "show", str(_bad_site(tmp_path))]) == 1
    plain = capsys.readouterr().err
    assert cli.main(["--debug", "site", "show", str(_bad_site(tmp_path))]) == 1
    debug = capsys.readouterr().err
    assert "Traceback" not in plain and plain.startswith("kit: error: ")
    assert (
        "Traceback (most recent call last)" in debug
        and "kit/site/" in debug
        and debug.endswith(plain)
    )
