"""The last-resort handler: a bug ends a command with one line and a traceback file, never a traceback.

The bug itself is planted (a command function replaced by one that raises): no shipped command is
meant to crash, so there is no real one to call.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kit import cli
from kit.crash import EXIT_BUG, debug_requested


def _boom(args):
    raise ZeroDivisionError("planted bug")


@pytest.fixture
def planted(monkeypatch, tmp_path):
    import kit.commands.site as site

    monkeypatch.setattr(site, "print_summary", lambda s: _boom(None))
    monkeypatch.setenv("KIT_CRASH_DIR", str(tmp_path / "crashes"))
    monkeypatch.delenv("KIT_DEBUG", raising=False)
    return tmp_path / "crashes"


def test_a_bug_is_one_line_naming_the_traceback_file(planted, capsys):
    assert cli.main(["site", "show", "laptop"]) == EXIT_BUG
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "ZeroDivisionError: planted bug" in err and "--debug" in err
    named = Path(re.search(r"the traceback is in (\S+);", err).group(1))
    assert named.parent == planted
    text = named.read_text()
    assert "Traceback (most recent call last)" in text and "planted bug" in text


def test_debug_prints_the_traceback_and_writes_no_file(planted, capsys):
    assert cli.main(["--debug", "site", "show", "laptop"]) == EXIT_BUG
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "ZeroDivisionError" in err
    assert not planted.exists()


def test_two_crashes_keep_two_files(planted, capsys):
    cli.main(["site", "show", "laptop"])
    cli.main(["site", "show", "laptop"])
    assert len(list(planted.iterdir())) == 2


def test_expected_errors_exit_1_with_one_line(capsys):
    assert cli.main(["site", "show", "atlantis"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("kit: error:") and err.count("\n") == 1


@pytest.mark.parametrize(
    "argv,debug,rest",
    [
        (["--debug", "site", "show"], True, ["site", "show"]),
        (["site", "--debug", "show"], True, ["site", "show"]),
        (["slurm", "render", "--", "--debug"], False, ["slurm", "render", "--", "--debug"]),
        (["site", "show"], False, ["site", "show"]),
    ],
)
def test_debug_flag_is_taken_only_before_the_passthrough(monkeypatch, argv, debug, rest):
    monkeypatch.delenv("KIT_DEBUG", raising=False)
    assert debug_requested(argv) == (debug, rest)


def test_a_reader_that_quit_ends_the_command_quietly(tmp_path):
    """`kit docs | head`: the reader is gone, which is no bug (exit 141 as for SIGPIPE, nothing on
    stderr, no crash file)."""
    reader, writer = os.pipe()
    os.close(reader)
    env = {**os.environ, "KIT_CRASH_DIR": str(tmp_path / "crashes")}
    try:
        done = subprocess.run(
            [sys.executable, "-m", "kit", "docs"], stdout=writer, stderr=subprocess.PIPE, env=env
        )
    finally:
        os.close(writer)
    assert (done.returncode, done.stderr) == (141, b"")
    assert not (tmp_path / "crashes").exists()
