"""remote_script.py runs on the site with a bare python3, so it keeps its own copy of the artifact
layout (kit.image_names): the names it accepts, NAME.current, the sha256 of a file. The copies
must agree, or a push would install what the local side cannot name (or the reverse)."""

from __future__ import annotations

import os

from hypothesis import given
from hypothesis import strategies as st

from kit import image_names
from kit.transfer import remote_script

NAME_CHARS = st.sampled_from("abcXYZ019._+-/\n @é")


def test_the_constants_are_the_same():
    assert remote_script.CURRENT == image_names.CURRENT
    assert set(remote_script.TAR_SUFFIXES) == set(image_names.TAR_GZ + image_names.TAR)
    assert set(remote_script.SQUASH_SUFFIXES) == set(image_names.SQUASH)
    assert remote_script.SHA_RE.pattern == image_names.SHA256_RE.pattern


@given(name=st.text(NAME_CHARS, max_size=12))
def test_both_sides_accept_the_same_image_names(name):
    """(The remote side also caps a name at 200 characters; the local side's names are shorter.)"""
    assert bool(remote_script.NAME_RE.fullmatch(name)) == bool(image_names.NAME_RE.fullmatch(name))


@given(
    name=st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,30}", fullmatch=True),
    imgdir=st.sampled_from(["/images", "/images/", "~/images", "rel/dir"]),
)
def test_both_sides_name_the_current_link_alike(name, imgdir):
    assert os.path.normpath(remote_script.current_path(imgdir, name)) == os.path.normpath(
        image_names.current_link(imgdir, name)
    )


@given(data=st.binary(max_size=3 * remote_script.BUF + 7))
def test_both_sides_hash_a_file_alike(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("h") / "img.tar"
    path.write_bytes(data)
    remote = remote_script.file_sha256(os.open(path, os.O_RDONLY), len(data))
    assert remote == image_names.sha256_file(path)
    assert (
        image_names.recorded_digest(image_names.sha256_line(remote, path.name), path.name) == remote
    )
