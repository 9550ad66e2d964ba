"""`kit transfer versions|rollback` against the loopback sshd: the kept versions are a way back."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from kit.errors import KitError
from kit.transfer import installed_versions, push, rollback
from tests.support.transfer import busybox_image, ch_run, have_charliecloud


def test_rollback_walks_back_through_the_kept_versions(sshd, user_home, make_site, tmp_path):
    have_charliecloud()
    site = make_site(keep_versions=2)
    current = tmp_path / "images" / "bb.current"
    shas = {}
    for content in ("one", "two", "three"):
        report = push(busybox_image(tmp_path / "bb.tar.gz", content.encode()), site, install=True)
        shas[content] = report.sha256[:12]

    found = installed_versions("bb", site)
    assert [v.entry for v in found.versions] == [f"bb@{shas[c]}" for c in ("three", "two", "one")]
    assert [v.current for v in found.versions] == [True, False, False]
    assert {v.format for v in found.versions} == {"dir"}

    dry = rollback("bb.tar.gz", site, dry_run=True)  # a file name works as the image name
    assert (dry.target, dry.previous) == (f"bb@{shas['two']}", f"bb@{shas['three']}")
    assert ch_run(current, "/bin/busybox", "cat", "/etc/kit-version") == "three"

    for expect in ("two", "one"):
        done = rollback("bb", site)
        assert done.target == f"bb@{shas[expect]}"
        assert ch_run(current, "/bin/busybox", "cat", "/etc/kit-version") == expect
    with pytest.raises(KitError, match=rf"bb@{shas['one']} is the oldest version of bb kept"):
        rollback("bb", site)
    with pytest.raises(KitError, match="--to 0000: matches no version of bb .* installed: bb@"):
        rollback("bb", site, to="0000")

    assert rollback("bb", site, to=shas["three"][:6]).target == f"bb@{shas['three']}"
    assert ch_run(current, "/bin/busybox", "cat", "/etc/kit-version") == "three"
    rollback("bb", site, to=f"bb@{shas['one']}")

    # a new install after a rollback keeps the version that was current (one) before older ones
    report = push(busybox_image(tmp_path / "bb.tar.gz", b"four"), site, install=True)
    assert report.pruned == [f"bb@{shas['two']}"]
    assert [v.entry for v in installed_versions("bb", site).versions] == [
        f"bb@{report.sha256[:12]}",
        f"bb@{shas['three']}",
        f"bb@{shas['one']}",
    ]


def test_cli_versions_and_rollback(sshd, home, make_site, tmp_path, repo):
    have_charliecloud()
    site = make_site()
    env = dict(os.environ, HOME=str(home))
    kit = [sys.executable, "-m", "kit", "transfer"]

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            kit + list(args) + ["--site", str(site)],
            capture_output=True,
            text=True,
            env=env,
            cwd=repo,
        )

    empty = run("versions", "app")
    assert empty.returncode == 0 and "no version of app installed" in empty.stdout
    for content in (b"a", b"b"):
        subprocess.run(
            kit
            + [
                "push",
                str(busybox_image(tmp_path / "src" / "app.tar.gz", content)),
                "--site",
                str(site),
                "--install",
            ],
            check=True,
            env=env,
            cwd=repo,
            capture_output=True,
        )
    listed = run("versions", "app")
    assert listed.returncode == 0
    rows = [line.split() for line in listed.stdout.splitlines() if "app@" in line]
    assert (
        len(rows) == 2 and rows[0][0] == "*" and rows[1][0].startswith("app@")
    )  # newest is current
    newest, older = rows[0][1], rows[1][0]
    current = tmp_path / "images" / "app.current"
    assert os.readlink(current) == newest
    dry = run("rollback", "app.tar.gz", "--dry-run")  # the pushed file's name names the image too
    assert (
        dry.returncode == 0
        and "would point" in dry.stdout
        and f"at {older} (was {newest})" in dry.stdout
    )
    assert f"/images/app.current at {older}" in dry.stdout
    assert os.readlink(current) == newest
    done = run("rollback", "app")
    assert done.returncode == 0 and os.readlink(current) == older
    bad = run("rollback", "../etc")
    assert bad.returncode == 1 and "image name '../etc'" in bad.stderr
