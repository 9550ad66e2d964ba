"""remote_common.py runs on the site with a bare python3, so it keeps its own copy of the artifact
layout (kit.image_names): the names it accepts, NAME.current, the sha256 of a file. The copies
must agree, or a push would install what the local side cannot name (or the reverse)."""

from __future__ import annotations

import os

from hypothesis import given
from hypothesis import strategies as st

from kit import image_names
from kit.image import sif
from kit.transfer import remote_common, remote_install

NAME_CHARS = st.sampled_from("abcXYZ019._+-/\n @é")


def test_the_constants_are_the_same():
    assert remote_common.CURRENT == image_names.CURRENT
    assert set(remote_common.TAR_SUFFIXES) == set(image_names.TAR_GZ + image_names.TAR)
    assert set(remote_common.SQUASH_SUFFIXES) == set(image_names.SQUASH)
    assert set(remote_common.SIF_SUFFIXES) == set(image_names.SIF)
    assert remote_common.SIF_MAGIC == sif.MAGIC and sif.looks_like_sif(
        bytes(remote_common.SIF_MAGIC_AT) + remote_common.SIF_MAGIC
    ), "the installer looks for SIF's magic where the kit's reader does"
    assert remote_common.SHA_RE.pattern == image_names.SHA256_RE.pattern


@given(name=st.text(NAME_CHARS, max_size=12))
def test_both_sides_accept_the_same_image_names(name):
    """(The remote side also caps a name at 200 characters; the local side's names are shorter.)"""
    assert bool(remote_common.NAME_RE.fullmatch(name)) == bool(image_names.NAME_RE.fullmatch(name))


@given(
    name=st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,30}", fullmatch=True),
    imgdir=st.sampled_from(["/images", "/images/", "~/images", "rel/dir"]),
)
def test_both_sides_name_the_current_link_alike(name, imgdir):
    assert os.path.normpath(remote_install.current_path(imgdir, name)) == os.path.normpath(
        image_names.current_link(imgdir, name)
    )


@given(data=st.binary(max_size=3 * remote_common.BUF + 7))
def test_both_sides_hash_a_file_alike(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("h") / "img.tar"
    path.write_bytes(data)
    remote = remote_common.file_sha256(os.open(path, os.O_RDONLY), len(data))
    assert remote == image_names.sha256_file(path)
    assert (
        image_names.recorded_digest(image_names.sha256_line(remote, path.name), path.name) == remote
    )
