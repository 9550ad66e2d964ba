"""KitError carries what went wrong, where and the fix; the command line prints them as one line (with
--json one JSON object), and with --debug the traceback of where it was raised too."""

from __future__ import annotations

import json
import os

from hypothesis import given
from hypothesis import strategies as st

from kit import cli, crash, pins
from kit.errors import KitError, error_line

PART = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=60).filter(
    lambda t: "; fix: " not in t
)


@given(what=PART, fix=PART)
def test_the_fix_is_a_part_given_apart_never_read_back_out_of_the_text(what, fix):
    """The parts are what a script reads (--json): a fix is given as fix=, and a text that merely
    reads like one line is kept whole as what went wrong."""
    parts, text = KitError(what, fix=fix), KitError(f"{what}; fix: {fix}")
    assert (parts.what, parts.fix) == (what, fix)
    assert (text.what, text.fix) == (f"{what}; fix: {fix}", None)
    assert str(parts) == str(text) == f"{what}; fix: {fix}"
    assert KitError(what, fix="").fix is None  # an empty fix is none: JSON's null, not ""


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


@given(what=PART, fix=st.none() | PART, where=st.none() | PART)
def test_the_json_form_is_one_line_of_the_same_parts(what, fix, where):
    error = KitError(what, fix=fix, where=where)
    text = error.json_line(1)
    assert "\n" not in text and text.isascii()
    assert json.loads(text) == {
        "error": {"what": what, "where": where, "fix": fix, "message": error.line(), "exit": 1}
    }


def test_a_path_of_bytes_that_are_no_utf8_stays_ascii_json():
    path = os.fsdecode(b"/data/\xff.yaml")  # a surrogate escape, as Python holds such a name
    doc = json.loads(KitError("no such file", where=path).json_line(1))
    assert os.fsencode(doc["error"]["where"]) == b"/data/\xff.yaml"


def _json_error(capsys, argv: list[str]) -> dict:
    """The command fails with exit 1, prints nothing on stdout and one JSON object on stderr."""
    assert cli.main(argv) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1, (out, err)
    doc = json.loads(err)
    assert set(doc) == {"error"} and doc["error"]["exit"] == 1
    return doc["error"]


def test_a_missing_file_with_json_is_a_json_error(tmp_path, capsys):
    error = _json_error(capsys, ["scale", "collect", str(tmp_path), "--json"])
    assert error["where"] == str(tmp_path / "plan.yaml") and error["what"] == "no plan here"
    assert error["fix"] == f"kit scale plan --dir {tmp_path} ..."
    assert cli.main(["scale", "collect", str(tmp_path)]) == 1  # the same error without --json
    assert capsys.readouterr().err == f"kit: error: {error['message']}\n"


def test_a_bad_site_with_json_is_a_json_error(tmp_path, capsys):
    site = _bad_site(tmp_path)
    error = _json_error(capsys, ["site", "show", str(site), "--json"])
    assert str(site) in error["message"] and "scheduler" in error["message"]
    error = _json_error(capsys, ["site", "show", "supermuc", "--json"])
    assert "did you mean 'supermuc-ng'?" in error["message"]


def test_an_unknown_site_of_an_mpi_command_with_json_is_a_json_error(tmp_path, capsys):
    error = _json_error(capsys, ["mpi", "pair", "--site", "supermuc", str(tmp_path), "--json"])
    assert "did you mean 'supermuc-ng'?" in error["message"]


def test_a_refused_write_with_json_is_a_json_error(tmp_path, capsys):
    """An OSError the machine raised (kit.crash.environment_problem) is an expected error too."""
    exc = PermissionError(13, "Permission denied", str(tmp_path / "ro" / "out.yaml"))
    error = crash.environment_problem(exc)
    assert error is not None and (error.where, error.fix) == (
        str(tmp_path / "ro"),
        "check the permissions of that path and of the directories above it, or choose another path",
    )
    assert error.what == "cannot create out.yaml in it (Permission denied)"


def test_json_is_asked_by_the_commands_option_only():
    from argparse import Namespace

    assert cli._wants_json(Namespace(json=True), ["x"])
    assert not cli._wants_json(Namespace(json=False), ["x", "--", "--json"])
    assert not cli._wants_json(None, ["site", "show", "--", "--json"])
    assert cli._wants_json(Namespace(words=["--json"]), ["scale", "predict", "--json"])


@given(what=PART, fix=st.none() | PART, where=st.none() | PART)
def test_a_reported_problem_reads_as_the_error_would(what, fix, where):
    """error_line: a problem a report lists (not raised) has the raised error's line."""
    assert error_line(what, fix=fix, where=where) == KitError(what, fix=fix, where=where).line()


@given(what=PART, fix=st.none() | PART)
def test_the_pin_lists_own_error_reads_as_kit_errors(what, fix):
    """kit/pins.py runs without the kit, so PinError formats its line itself: the same line."""
    assert str(pins.PinError(what, fix=fix)) == KitError(what, fix=fix).line()
