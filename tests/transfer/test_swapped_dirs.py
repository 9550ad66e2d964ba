"""The remote side of kit transfer when the directory it was given is swapped, between two pushes,
for a symlink someone else made (another user of a shared tree): the receiver, the probe, the
installer, the listing and the switch refuse it in one line and write, list or change nothing
through it. A link of the user's own (or root's: a home on another filesystem) is followed, as
before. Run as the site runs remote_script.py: a subprocess, driven over pipes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kit.transfer.remote import RemoteError, parse
from tests.support.receiver import (
    BOUND,
    DATA,
    SCRIPT,
    one_error_line,
    probe_argv,
    receive_argv,
    stdin_for,
)

pytestmark = pytest.mark.system  # an sshd of its own, or files of another user: root

NOBODY = 65534
EXIT_REFUSED = 8
VERSION = "0123456789ab"


def argv_for(mode: str, up: Path, images: Path) -> list[str]:
    """MODE's command line with the swapped directory where that mode takes one."""
    if mode == "push":
        return receive_argv(up)
    if mode == "probe":
        return probe_argv(up)
    if mode == "install-src":
        return [
            sys.executable,
            str(SCRIPT),
            "install",
            str(up / "img.tar.gz"),
            str(images),
            "img",
            VERSION,
            "1",
            "0",
            "dir",
        ]
    if mode == "install-imgdir":
        return [
            sys.executable,
            str(SCRIPT),
            "install",
            str(images.parent / "img.tar.gz"),
            str(up),
            "img",
            VERSION,
            "1",
            "0",
            "dir",
        ]
    if mode == "versions":
        return [sys.executable, str(SCRIPT), "versions", str(up), "img"]
    return [sys.executable, str(SCRIPT), "switch", str(up), "img", f"img@{VERSION}", "0"]


@pytest.mark.parametrize(
    "mode", ["push", "probe", "install-src", "install-imgdir", "versions", "switch"]
)
def test_a_directory_swapped_for_another_users_link_is_not_followed(tmp_path, mode):
    up, elsewhere, images = tmp_path / "up", tmp_path / "elsewhere", tmp_path / "images"
    up.mkdir()
    images.mkdir()
    first = subprocess.run(
        receive_argv(up), input=stdin_for(DATA), capture_output=True, timeout=BOUND
    )
    assert first.returncode == 0 and (up / "img.tar.gz").read_bytes() == DATA, (
        first.stderr
    )  # the first push

    elsewhere.mkdir()
    (
        elsewhere / f"img@{VERSION}"
    ).mkdir()  # what a switch or listing there would take for a version
    (elsewhere / "img.tar.gz").write_bytes(DATA)
    os.rename(up, tmp_path / "up.old")
    up.symlink_to(elsewhere)
    os.lchown(up, NOBODY, NOBODY)  # made by another user
    (tmp_path / "img.tar.gz").write_bytes(DATA)
    before = sorted(p.name for p in elsewhere.iterdir())

    res = subprocess.run(
        argv_for(mode, up, images), input=stdin_for(DATA), capture_output=True, timeout=BOUND
    )
    assert res.returncode == EXIT_REFUSED, res.stderr
    line = one_error_line(res.stderr)
    assert f"{up} is a symlink of uid {NOBODY}, neither this user's nor root's" in line, line
    with pytest.raises(RemoteError) as relayed:  # as the kit shows it: the script's own fix
        parse("", res.stderr.decode(), res.returncode, what=mode, where=f"host:{up}")
    assert relayed.value.fix == "remove it (or use another directory)", relayed.value.line()
    assert sorted(p.name for p in elsewhere.iterdir()) == before and res.stdout == b""
    assert os.readlink(up) == str(elsewhere) and sorted(p.name for p in images.iterdir()) == []

    os.lchown(up, os.geteuid(), os.getegid())  # the user's own link: followed, as before
    again = subprocess.run(
        receive_argv(up), input=stdin_for(DATA), capture_output=True, timeout=BOUND
    )
    assert again.returncode == 0 and (elsewhere / "img.tar.gz").read_bytes() == DATA, again.stderr
