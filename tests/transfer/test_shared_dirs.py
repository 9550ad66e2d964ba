"""kit transfer push --install into directories shared with other people and other pushes, over
the loopback sshd: two pushes of one image at once, and links or files of someone else planted
at the names a push writes (the receiver's, the sibling copies', the installer's)."""

from __future__ import annotations

import hashlib
import os
import threading

import pytest

from kit.errors import KitError
from kit.transfer import push
from tests.support.transfer import busybox_image, ch_run, have_charliecloud, random_image

MiB = 1 << 20
NOBODY = 65534


def leftovers(*dirs) -> list[str]:
    return sorted(
        f"{d.name}/{p.name}"
        for d in dirs
        if d.exists()
        for p in d.iterdir()
        if p.name.startswith(".")
    )


def test_two_push_install_of_one_image_at_once(sshd, user_home, make_site, tmp_path):
    """A re-run while the first still runs, or two operators: each push either succeeds or says
    another one is busy; NAME.current names a complete image; no temp name is left."""
    have_charliecloud()
    site = make_site()
    img = busybox_image(tmp_path / "bb.tar.gz", b"both" + os.urandom(16 * MiB))
    outcomes: list[object] = [None, None]

    def run(i: int) -> None:
        try:
            outcomes[i] = push(img, site, install=True)
        except Exception as exc:  # noqa: BLE001 - the test sorts clean refusals from bugs below
            outcomes[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    errors = [o for o in outcomes if isinstance(o, Exception)]
    assert len(errors) < 2, errors
    for exc in errors:
        assert isinstance(exc, KitError) and "another kit transfer" in str(exc), repr(exc)
    current = tmp_path / "images" / "bb.current"
    assert os.readlink(current) == "bb@" + hashlib.sha256(img.read_bytes()).hexdigest()[:12]
    assert ch_run(current, "/bin/busybox", "head", "-c", "4", "/etc/kit-version") == "both"
    assert leftovers(tmp_path / "remote", tmp_path / "images") == []


@pytest.mark.parametrize(
    "planted",
    ["sibling-temp-link", "sibling-link", "part-of-another-user", "install-temp-of-another-user"],
)
def test_what_others_planted_in_the_shared_dirs_is_left_alone(
    sshd, user_home, make_site, tmp_path, planted
):
    have_charliecloud()
    site = make_site()
    img = busybox_image(tmp_path / "s.tar.gz", b"s")
    version = hashlib.sha256(img.read_bytes()).hexdigest()[:12]
    remote, images = tmp_path / "remote", tmp_path / "images"
    remote.mkdir()
    images.mkdir()
    canary = tmp_path / "canary"
    canary.write_text("canary")
    path = {
        "sibling-temp-link": remote / ".s.tar.gz.sha256.tmp",  # the name an SFTP copy once used
        "sibling-link": remote / "s.tar.gz.sha256",
        "part-of-another-user": remote / ".s.tar.gz.part",
        "install-temp-of-another-user": images / f".s@{version}.tmp",
    }[planted]
    if planted == "part-of-another-user":
        path.write_text("their bytes")
        os.chown(path, NOBODY, NOBODY)
    else:
        path.symlink_to(canary)
        if planted == "install-temp-of-another-user":
            os.lchown(path, NOBODY, NOBODY)

    if planted in ("sibling-link", "part-of-another-user"):
        with pytest.raises(KitError, match=str(path.name)):
            push(img, site, install=True)
    else:
        push(img, site, install=True)
        assert os.readlink(images / "s.current") == f"s@{version}"
    assert canary.read_text() == "canary"
    if planted == "part-of-another-user":
        assert path.read_text() == "their bytes" and path.stat().st_uid == NOBODY
    else:
        assert os.readlink(path) == str(canary), "the planted link is neither followed nor removed"


def test_a_foreign_final_image_is_not_replaced(sshd, user_home, make_site, tmp_path):
    """Another user's file under the image's name in a shared upload dir: refused, unchanged."""
    site = make_site()
    img = random_image(tmp_path / "f.tar.gz", 5000)
    theirs = tmp_path / "remote" / "f.tar.gz"
    theirs.parent.mkdir()
    theirs.write_text("their image")
    os.chown(theirs, NOBODY, NOBODY)
    with pytest.raises(KitError, match="f.tar.gz belongs to uid 65534"):
        push(img, site)
    assert theirs.read_text() == "their image"
