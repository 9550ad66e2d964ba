"""Hostile or broken archives stop the conversion with an error naming layer and member,
and leave nothing behind (no output, no temporary files, no sidecars)."""
from __future__ import annotations

import shutil
import tarfile
import zlib

import pytest

from kit.errors import KitError
from kit.image import Limits, convert
from tests.image.builders import layer_blob, oci_layout, tar_bytes

BUSYBOX = [("bin", "d", None), ("bin/sh", "f", b"#!fake\n")]


def fails(src, tmp_path, match: str, fmt: str = "tar.gz", **kw) -> str:
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    name = {"tar.gz": "img.tar.gz", "sqfs": "img.sqfs", "dir": "img", "tar": "img.tar"}[fmt]
    with pytest.raises(KitError) as err:
        convert(src, out / name, **kw)
    assert list(out.iterdir()) == [], "a failed conversion left files behind"
    text = str(err.value)
    for part in match.split("|"):
        assert part in text, f"{part!r} not in {text!r}"
    return text


@pytest.mark.parametrize("members,match", [
    ([("../evil", "f", b"x")], "layer 0|'../evil'|traversal"),
    ([("a", "d", None), ("a/../../evil", "f", b"x")], "layer 0|'a/../../evil'|traversal"),
    ([("a", "d", None), ("a/esc", "l", "../../etc/passwd")], "layer 0|'a/esc'|climbs out"),
    ([("h", "h", "../../etc/passwd")], "layer 0|hard link 'h' target|'..'"),
    ([("h", "h", "etc/shadow")], "layer 0|hard link 'h' points to 'etc/shadow'"),
    ([("lnk", "l", "/etc"), ("lnk/passwd", "f", b"x")], "layer 0|'lnk/passwd'|through the symlink"),
    ([("x", "f", b"1"), ("x", "f", b"2")], "layer 0|'x' appears twice"),
    ([("bad\udcff", "f", b"x")], "layer 0|not UTF-8"),
    ([("d", "d", None), ("d/" + "x" * 300, "f", b"x")], "layer 0|overlong"),
], ids=["traversal", "inner-traversal", "symlink-escape", "hardlink-escape", "hardlink-missing",
        "write-through-same-layer", "duplicate", "non-utf8", "overlong"])
def test_unsafe_members(tmp_path, members, match):
    src = oci_layout(tmp_path / "src", [tar_bytes(BUSYBOX + members)])
    fails(src, tmp_path, match)


@pytest.mark.parametrize("fmt", ["tar.gz", "tar", "sqfs", "dir"])
def test_write_through_symlink_from_lower_layer(tmp_path, fmt):
    """Layer 0 makes /lnk -> /etc; layer 1 writes lnk/passwd: would overwrite /etc/passwd."""
    layers = [tar_bytes(BUSYBOX + [("etc", "d", None), ("lnk", "l", "/etc")]),
              tar_bytes([("lnk/passwd", "f", b"pwned\n")])]
    src = oci_layout(tmp_path / "src", layers)
    fails(src, tmp_path, "layer 1 (sha256:|'lnk/passwd'|through the symlink 'lnk'", fmt)


def test_digest_mismatch(tmp_path):
    src = oci_layout(tmp_path / "src", [tar_bytes(BUSYBOX + [("f", "f", b"A" * 4096)])],
                     gzip_layers=False)
    blob = layer_blob(src, 0)
    data = bytearray(blob.read_bytes())
    data[data.index(b"AAAA")] = ord("B")  # same size, different content
    blob.write_bytes(bytes(data))
    fails(src, tmp_path, f"layer 0 (sha256:{blob.name})|does not match its digest")


def test_docker_archive_diff_id_mismatch(rich, tmp_path):
    """docker-archive layers are known by their uncompressed digest: tampering is caught."""
    src = tmp_path / "docker.tar"
    shutil.copy(rich / "docker.tar", src)
    with tarfile.open(src) as tf:
        big = max(tf.getmembers(), key=lambda m: m.size)
    with open(src, "r+b") as fh:
        fh.seek(big.offset_data + big.size // 2)
        byte = fh.read(1)
        fh.seek(-1, 1)
        fh.write(bytes([byte[0] ^ 0xFF]))
    fails(src, tmp_path, "layer 0 (sha256:|diff_id")


def test_truncated_blob_with_matching_descriptor(tmp_path):
    """Digest and size agree with the stored bytes, but the gzip stream stops half-way."""
    src = oci_layout(tmp_path / "src", [tar_bytes(BUSYBOX + [("f", "f", bytes(range(256)) * 400)])],
                     stored=lambda data: data[: len(data) // 2])
    fails(src, tmp_path, "layer 0|truncated or corrupt")


def test_truncated_uncompressed_upper_layer(tmp_path):
    """Upper layers are indexed by seeking over their data: truncation is still caught."""
    layers = [tar_bytes(BUSYBOX), tar_bytes([("f", "f", b"x" * 5000), ("g", "f", b"y")])]
    src = oci_layout(tmp_path / "src", layers, gzip_layers=False,
                     stored=lambda data: data[:2048] if b"x" * 5000 in data else data)
    fails(src, tmp_path, "layer 1 (sha256:|truncated or corrupt")


def test_truncated_blob_file(tmp_path):
    src = oci_layout(tmp_path / "src", [tar_bytes(BUSYBOX)])
    blob = layer_blob(src, 0)
    blob.write_bytes(blob.read_bytes()[:-10])
    fails(src, tmp_path, f"layer 0 (sha256:{blob.name})|truncated or corrupt")


def test_decompression_bomb(tmp_path):
    zeros = tar_bytes(BUSYBOX + [("zeros", "f", bytes(48 << 20))])
    src = oci_layout(tmp_path / "src", [zeros])
    limits = Limits(max_ratio=50, ratio_floor=8 << 20)
    fails(src, tmp_path, "layer 0|decompression bomb", limits=limits)
    fails(src, tmp_path, "layer 0|--max-size", limits=Limits(max_size=16 << 20))


def test_member_limit(tmp_path):
    many = tar_bytes([(f"f{i}", "f", b"") for i in range(300)])
    src = oci_layout(tmp_path / "src", [many])
    fails(src, tmp_path, "layer 0|--max-members 100|'f100'", limits=Limits(max_members=100))


def test_corrupt_gzip_is_named(tmp_path):
    src = oci_layout(tmp_path / "src", [tar_bytes(BUSYBOX)],
                     stored=lambda data: data[:20] + zlib.compress(b"junk") + data[40:])
    fails(src, tmp_path, "layer 0|truncated or corrupt")
