"""KitError carries what went wrong, where and the fix; the command line prints them as one line, as
one JSON line on stderr under --json, and with --debug the traceback of where it was raised too."""
from __future__ import annotations

import json
import subprocess
import sys

from hypothesis import given, strategies as st

from kit import cli
from kit.errors import KitError

PART = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=60).filter(
    lambda t: "; fix: " not in t)


@given(what=PART, fix=PART)
def test_the_parts_and_the_one_string_form_are_the_same_error(what, fix):
    parts, line = KitError(what, fix=fix), KitError(f"{what}; fix: {fix}")
    assert (parts.what, parts.fix) == (line.what, line.fix) == (what, fix)
    assert str(parts) == str(line) == f"{what}; fix: {fix}"


def test_where_leads_the_line_and_a_message_without_a_fix_has_none():
    error = KitError("key 'nodes' is -1, expected 1..16", fix="give a positive node count", where="plan.yaml:3")
    assert str(error) == "plan.yaml:3: key 'nodes' is -1, expected 1..16; fix: give a positive node count"
    assert KitError("no such file").fix is None and str(KitError("no such file")) == "no such file"


def _bad_site(tmp_path):
    path = tmp_path / "site.yaml"
    path.write_text("name: x\nscheduler: 3\n")
    return path


def test_json_puts_the_error_on_stderr_as_one_json_line_and_nothing_on_stdout(tmp_path):
    done = subprocess.run([sys.executable, "-m", "kit", "site", "show", str(_bad_site(tmp_path)), "--json"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and done.stdout == ""
    [line] = done.stderr.splitlines()
    document = json.loads(line)
    assert document["schema"] == "kit-error/1" and set(document) == {"schema", "error", "what", "where", "fix"}
    assert document["error"].startswith(f"{tmp_path / 'site.yaml'}: invalid site config")
    text = subprocess.run([sys.executable, "-m", "kit", "site", "show", str(_bad_site(tmp_path))],
                          capture_output=True, text=True, timeout=120)
    assert text.stderr == f"kit: error: {document['error']}\n"  # the same words as without --json


def test_debug_shows_where_an_expected_error_was_raised(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("KIT_DEBUG", raising=False)
    assert cli.main(["site", "show", str(_bad_site(tmp_path))]) == 1
    plain = capsys.readouterr().err
    assert cli.main(["--debug", "site", "show", str(_bad_site(tmp_path))]) == 1
    debug = capsys.readouterr().err
    assert "Traceback" not in plain and plain.startswith("kit: error: ")
    assert "Traceback (most recent call last)" in debug and "kit/site/" in debug and debug.endswith(plain)
