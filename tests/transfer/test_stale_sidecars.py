"""A push of another image under a name pushed before, over the loopback sshd: what the earlier
image had beside it and this one lacks (its .sha256, its pair file) must not stay beside the new
image claiming to describe it (jobs would record the old digest, bind the old image's MPI). The
kit's own such sidecars go; a file of the user's there is left alone and the push says so in one
line; a checksum of the new image itself is kept."""

from __future__ import annotations

import hashlib

import pytest
import yaml

from kit.errors import KitError
from kit.transfer import push
from tests.support.transfer import random_image

MiB = 1 << 20


def test_an_earlier_images_sidecars_do_not_stay_beside_another_image(
    sshd, user_home, make_site, tmp_path
):
    site, remote = make_site(), tmp_path / "remote"
    first = random_image(tmp_path / "a" / "img.tar.gz", 2 * MiB, seed=1)  # with img.tar.gz.sha256
    pair = first.with_name("img.tar.gz.pair.yaml")
    pair.write_text(yaml.safe_dump({"kit_pair": 1, "site": "sshtest", "binds": []}))
    push(first, site, chunk_size=MiB)
    assert sorted(p.name for p in remote.iterdir()) == [
        "img.tar.gz",
        "img.tar.gz.pair.yaml",
        "img.tar.gz.sha256",
    ]

    second = tmp_path / "b" / "img.tar.gz"  # another image, no sidecars
    second.parent.mkdir()
    second.write_bytes(b"another image" * 1000)
    report = push(second, site, chunk_size=MiB)
    assert sorted(p.name for p in remote.iterdir()) == ["img.tar.gz"]
    assert (remote / "img.tar.gz").read_bytes() == second.read_bytes()
    assert sorted(report.stale) == ["img.tar.gz.pair.yaml", "img.tar.gz.sha256"]
    assert "removed an earlier image's" in "\n".join(report.lines())

    digest = hashlib.sha256(second.read_bytes()).hexdigest()  # the new image's own checksum: kept
    (remote / "img.tar.gz.sha256").write_text(f"{digest}  img.tar.gz\n")
    (remote / "img.tar.gz.manifest.json").write_text('{"mine": "a note of the user"}\n')
    with pytest.raises(
        KitError,
        match=r"img\.tar\.gz\.manifest\.json is beside the image but was not written by kit for it, "
        r".* it is left alone; fix: remove it",
    ):
        push(second, site, chunk_size=MiB)
    assert (remote / "img.tar.gz.manifest.json").read_text() == '{"mine": "a note of the user"}\n'
    assert (remote / "img.tar.gz.sha256").read_text() == f"{digest}  img.tar.gz\n"
