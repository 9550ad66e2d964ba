"""Both ends of a push read the artifact layout's names from kit.artifact_names (the site's script
gets its text inlined). What is still written twice is the code around them, for the site's bare
python3: the NAME.current path and the file hash. They must agree, or a push would install what
the local side cannot name (or the reverse)."""

from __future__ import annotations

import os

from hypothesis import given
from hypothesis import strategies as st

from kit import artifact_names, image_names
from kit.image import sif
from kit.transfer import remote_common, remote_install
from kit.transfer.assemble import script
from kit.transfer.remote_common import Usage

NAME_CHARS = st.sampled_from("abcXYZ019._+-/\n @é")


def test_the_script_sent_holds_the_names_once_and_the_kit_reads_them_from_there():
    text = script().decode()
    assert text.count("\nNAME_RE = ") == 1 and text.count("\nCURRENT = ") == 1
    assert image_names.NAME_RE is artifact_names.NAME_RE
    assert sif.looks_like_sif(bytes(artifact_names.SIF_MAGIC_AT) + artifact_names.SIF_MAGIC)
    assert sif.HEADER.unpack(bytes(sif.HEADER.size))[0] == bytes(artifact_names.SIF_MAGIC_AT), (
        "SIF's launch line is the bytes before its magic"
    )


@given(name=st.text(NAME_CHARS, max_size=12) | st.just("a" * 200) | st.just("a" * 201))
def test_both_sides_accept_the_same_image_names(name):
    try:
        remote_common.check_name(name, "NAME")
        remote = True
    except Usage:
        remote = False
    try:
        local = image_names.image_name(name) == name
    except image_names.KitError:
        local = False
    assert remote == local == artifact_names.is_name(name)


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
