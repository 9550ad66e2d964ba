"""Hostile or broken archives stop the conversion with an error naming layer and member,
and leave nothing behind (no output, no temporary files, no sidecars)."""

from __future__ import annotations

import contextlib
import gzip as gzlib
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import zlib
from pathlib import Path

import pytest

from kit.errors import KitError
from kit.image import Limits, convert
from tests.image import rawtar
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


@pytest.mark.parametrize(
    "members,match",
    [
        ([("../evil", "f", b"x")], "layer 0|'../evil'|traversal"),
        ([("a", "d", None), ("a/../../evil", "f", b"x")], "layer 0|'a/../../evil'|traversal"),
        ([("a", "d", None), ("a/esc", "l", "../../etc/passwd")], "layer 0|'a/esc'|climbs out"),
        ([("h", "h", "../../etc/passwd")], "layer 0|hard link 'h' target|'..'"),
        ([("h", "h", "etc/shadow")], "layer 0|hard link 'h' points to 'etc/shadow'"),
        (
            [("lnk", "l", "/etc"), ("lnk/passwd", "f", b"x")],
            "layer 0|'lnk/passwd'|through the symlink",
        ),
        ([("x", "f", b"1"), ("x", "f", b"2")], "layer 0|'x' (file) clashes with the file"),
        ([("bad\udcff", "f", b"x")], "layer 0|not UTF-8"),
        ([("d", "d", None), ("d/" + "x" * 300, "f", b"x")], "layer 0|overlong"),
    ],
    ids=[
        "traversal",
        "inner-traversal",
        "symlink-escape",
        "hardlink-escape",
        "hardlink-missing",
        "write-through-same-layer",
        "duplicate",
        "non-utf8",
        "overlong",
    ],
)
def test_unsafe_members(tmp_path, members, match):
    src = oci_layout(tmp_path / "src", [tar_bytes(BUSYBOX + members)])
    fails(src, tmp_path, match)


@pytest.mark.parametrize("fmt", ["tar.gz", "tar", "sqfs", "dir"])
def test_write_through_symlink_from_lower_layer(tmp_path, fmt):
    """Layer 0 makes /lnk -> /etc; layer 1 writes lnk/passwd: would overwrite /etc/passwd."""
    layers = [
        tar_bytes(BUSYBOX + [("etc", "d", None), ("lnk", "l", "/etc")]),
        tar_bytes([("lnk/passwd", "f", b"pwned\n")]),
    ]
    src = oci_layout(tmp_path / "src", layers)
    fails(src, tmp_path, "layer 1 (sha256:|'lnk/passwd'|through the symlink 'lnk'", fmt)


def test_digest_mismatch(tmp_path):
    src = oci_layout(
        tmp_path / "src", [tar_bytes(BUSYBOX + [("f", "f", b"A" * 4096)])], gzip_layers=False
    )
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
    src = oci_layout(
        tmp_path / "src",
        [tar_bytes(BUSYBOX + [("f", "f", bytes(range(256)) * 400)])],
        stored=lambda data: data[: len(data) // 2],
    )
    fails(src, tmp_path, "layer 0|truncated or corrupt")


def test_truncated_uncompressed_upper_layer(tmp_path):
    """Upper layers are indexed by seeking over their data: truncation is still caught."""
    layers = [tar_bytes(BUSYBOX), tar_bytes([("f", "f", b"x" * 5000), ("g", "f", b"y")])]
    src = oci_layout(
        tmp_path / "src",
        layers,
        gzip_layers=False,
        stored=lambda data: data[:2048] if b"x" * 5000 in data else data,
    )
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
    src = oci_layout(
        tmp_path / "src",
        [tar_bytes(BUSYBOX)],
        stored=lambda data: data[:20] + zlib.compress(b"junk") + data[40:],
    )
    fails(src, tmp_path, "layer 0|truncated or corrupt")


# -- every parser terminates, with bounded work ---------------------------------------------

BASE_TAR = [rawtar.member("bin", kind="d"), rawtar.member("bin/sh", b"#!fake\n")]


def backwards(size: int = -1536) -> bytes:
    """A member whose negative size points back at bin/sh's header: tarfile would loop."""
    return rawtar.archive(
        *BASE_TAR, rawtar.with_size_field(rawtar.member("x", b""), rawtar.base256(size))
    )


@pytest.mark.timeout(60)
@pytest.mark.parametrize("gzip_layers", [False, True], ids=["plain", "gzip"])
@pytest.mark.parametrize("where", [0, 1], ids=["base", "upper"])
def test_negative_size_in_a_layer(tmp_path, gzip_layers, where):
    """Base-256 size -1536 sends the next header back to bin/sh: an endless loop when seekable."""
    layers = [tar_bytes(BUSYBOX), backwards()] if where else [backwards()]
    src = oci_layout(tmp_path / "src", layers, gzip_layers=gzip_layers)
    fails(src, tmp_path, f"layer {where} (sha256:|header at byte 1536 has a negative size")


@pytest.mark.timeout(60)
def test_negative_pax_size(tmp_path):
    forged = rawtar.archive(*BASE_TAR, rawtar.pax_member("x", rawtar.pax_record("size", b"-2048")))
    src = oci_layout(tmp_path / "src", [tar_bytes(BUSYBOX), forged], gzip_layers=False)
    fails(src, tmp_path, "layer 1 (sha256:|pax size -2048 is negative")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["docker", "oci"])
def test_negative_size_in_the_outer_archive(rich, tmp_path, kind):
    """detect() and the blob index walk the outer tar: a backwards size must not loop them."""
    src = tmp_path / f"{kind}.tar"
    good = (rich / f"{kind}.tar").read_bytes()
    end = len(good.rstrip(b"\0")) + (-len(good.rstrip(b"\0")) % 512)
    forged = rawtar.with_size_field(rawtar.member("zz", b""), rawtar.base256(-end - 512))
    src.write_bytes(good[:end] + forged + bytes(1024))
    fails(src, tmp_path, f"{src}|negative size")


@pytest.mark.timeout(60)
def test_quadratic_pax_records_are_refused_fast(tmp_path):
    """tarfile's pax regexes are quadratic (CVE-2024-6232): 1 MiB of them would take hours."""
    records = b"1" * (1 << 20)
    forged = rawtar.archive(*BASE_TAR, rawtar.pax_member("x", records))
    src = oci_layout(tmp_path / "src", [forged], gzip_layers=False)
    fails(src, tmp_path, "layer 0 (sha256:|pax header at byte 1536: malformed record")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["fifo", "/dev/zero", "/dev/null"])
def test_source_that_is_no_regular_file(tmp_path, kind):
    """A FIFO would block the open forever; /dev/zero never ends."""
    src = tmp_path / "fifo" if kind == "fifo" else Path(kind)
    if kind == "fifo":
        os.mkfifo(src)
    fails(src, tmp_path, f"{src}: the source is a|not a regular file")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("what", ["blob", "index.json", "blob symlink"])
def test_layout_file_that_is_no_regular_file(tmp_path, what):
    src = oci_layout(tmp_path / "src", [tar_bytes(BUSYBOX)])
    victim = layer_blob(src, 0) if what != "index.json" else src / "index.json"
    victim.unlink()
    if what == "blob symlink":
        victim.symlink_to("/dev/zero")
        fails(src, tmp_path, f"{victim.name} is a symlink")
    else:
        os.mkfifo(victim)
        fails(src, tmp_path, "is a FIFO, not a regular file")


# -- nothing is lost silently ---------------------------------------------------------------


def corrupt_after(members: list[bytes], index: int) -> tuple[bytes, int]:
    """The archive with member INDEX's header checksum broken, and that header's offset."""
    offset = sum(map(len, members[:index]))
    data = bytearray(rawtar.archive(*members))
    data[offset + 148] ^= 0x11
    return bytes(data), offset


@pytest.mark.parametrize("gzip_rootfs", [False, True], ids=["tar", "tar.gz"])
def test_corrupt_header_mid_flat_rootfs(tmp_path, gzip_rootfs):
    """GNU tar exits 2 on this file; tarfile stops quietly at the bad header and drops the rest."""
    members = BASE_TAR + [rawtar.member(f"f{i}", b"%d" % i) for i in range(5)]
    data, offset = corrupt_after(members, 4)
    src = tmp_path / ("rootfs.tar.gz" if gzip_rootfs else "rootfs.tar")
    src.write_bytes(gzlib.compress(data) if gzip_rootfs else data)
    tar = subprocess.run(["tar", "-tf", str(src)], capture_output=True)
    assert tar.returncode == 2, "GNU tar should refuse this file too"
    text = fails(src, tmp_path, f"corrupt tar header at byte {offset}")
    assert str(src) in text or "layer 0" in text


@pytest.mark.parametrize("where", [0, 1], ids=["base", "upper"])
def test_corrupt_header_mid_layer(tmp_path, where):
    members = BASE_TAR + [rawtar.member("a", b"1"), rawtar.member("b", b"2")]
    data, offset = corrupt_after(members, 3)
    for gz in (False, True):
        layers = [tar_bytes(BUSYBOX), data] if where else [data]
        src = oci_layout(tmp_path / f"src{gz}", layers, gzip_layers=gz)
        fails(src, tmp_path, f"layer {where} (sha256:|corrupt tar header at byte {offset}")
        # zero blocks past the end are padding, not a header: still fine
        padded = rawtar.archive(*members) + bytes(20 * 512)
        layers = [tar_bytes(BUSYBOX), padded] if where else [padded]
        src = oci_layout(tmp_path / f"good{gz}", layers, gzip_layers=gz)
        convert(src, tmp_path / f"img{gz}")
        assert (tmp_path / f"img{gz}/b").read_bytes() == b"2"


# -- no tracebacks for expected failures ----------------------------------------------------


@pytest.mark.parametrize("fmt", ["dir", "tar", "sqfs"])
@pytest.mark.parametrize(
    "key,value,match",
    [
        ("mtime", b"inf", "member 'x' has mtime inf"),
        ("mtime", b"nan", "member 'x' has mtime nan"),
        ("mtime", b"1e30", "member 'x' has mtime 1e+30"),
        ("mtime", b"-5", "member 'x' has mtime -5.0"),
        ("path", b"a\0b", "has a NUL byte in its name"),
        ("linkpath", b"a\0b", "symlink 'x' has a target with a NUL byte"),
    ],
    ids=["inf", "nan", "huge", "negative", "nul-path", "nul-link"],
)
def test_forged_pax_fields(tmp_path, fmt, key, value, match):
    kind = "l" if key == "linkpath" else "f"
    forged = rawtar.archive(
        *BASE_TAR, rawtar.pax_member("x", rawtar.pax_record(key, value), kind=kind)
    )
    src = oci_layout(tmp_path / "src", [forged])
    fails(src, tmp_path, f"layer 0|{match}", fmt)


@pytest.mark.parametrize("fmt", ["dir", "tar"])
def test_six_kilobyte_symlink_target(tmp_path, fmt):
    src = oci_layout(tmp_path / "src", [tar_bytes(BUSYBOX + [("s", "l", "a" * 6000)])])
    fails(src, tmp_path, "layer 0|symlink 's' has a target of 6000 bytes", fmt)


@pytest.mark.parametrize("fmt", ["dir", "tar.gz"])
def test_member_larger_than_its_layer(tmp_path, fmt):
    """The header says 100000 bytes, the layer holds 1000: the data read fails, no traceback."""
    big = rawtar.with_size_field(rawtar.member("big", b"x" * 1000), b"%011o\0" % 100_000)
    src = oci_layout(tmp_path / "src", [b"".join(BASE_TAR) + big])
    fails(src, tmp_path, "layer 0|'big'|truncated or corrupt", fmt)


def test_deeply_nested_member(tmp_path):
    """1500 directories deep is within the path limit; no recursion may depend on depth."""
    deep = "a/" * 1500 + "f"
    src = oci_layout(tmp_path / "src", [tar_bytes(BUSYBOX + [(deep, "f", b"deep")])])
    out = tmp_path / "img.tar"
    convert(src, out)
    with tarfile.open(out) as tf:
        assert tf.extractfile(deep).read() == b"deep"


def test_deeply_nested_rootfs_directory(tmp_path):
    root = tmp_path / "rootfs"
    levels = [str(root) + "/d" * n for n in range(1201)]
    for level in levels:  # os.makedirs and shutil.rmtree recurse once per level: loops
        os.mkdir(level)
    try:
        with open(levels[-1] + "/f", "w") as fh:
            fh.write("deep")
        out = tmp_path / "img.tar"
        convert(root, out)
        with tarfile.open(out) as tf:
            assert tf.extractfile("d/" * 1200 + "f").read() == b"deep"
    finally:  # pytest's own cleanup of tmp_path would hit the recursion limit
        with contextlib.suppress(FileNotFoundError):
            os.unlink(levels[-1] + "/f")
        for level in reversed(levels):
            os.rmdir(level)


def layout_json(tmp_path, which: str, path: tuple | None, value) -> Path:
    """A good layout whose index.json, manifest or config has PATH set to VALUE (or is VALUE),
    the blobs above it re-hashed so only the edit is wrong."""
    src = oci_layout(tmp_path / "src", [tar_bytes(BUSYBOX)])
    index = json.loads((src / "index.json").read_text())
    manifest = json.loads(blob_of(src, index["manifests"][0]["digest"]).read_bytes())
    config = json.loads(blob_of(src, manifest["config"]["digest"]).read_bytes())

    def edited(name: str, doc):
        if name != which:
            return doc
        if path is None:
            return value
        target = doc
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
        return doc

    def store(doc) -> str:
        data = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
        digest = hashlib.sha256(data).hexdigest()
        (src / "blobs/sha256" / digest).write_bytes(data)
        return f"sha256:{digest}"

    manifest["config"]["digest"] = store(edited("config", config))
    index["manifests"][0]["digest"] = store(edited("manifest", manifest))
    index = edited("index", index)
    (src / "index.json").write_bytes(
        index if isinstance(index, bytes) else json.dumps(index).encode()
    )
    return src


def blob_of(src: Path, digest: str) -> Path:
    return src / "blobs/sha256" / digest.split(":")[1]


@pytest.mark.parametrize(
    "which,path,value,match",
    [
        ("index", None, [], "index.json: the document is a list, expected an object"),
        ("index", ("manifests",), {}, "index.json: manifests is an object, expected a list"),
        (
            "index",
            ("manifests", 0),
            "x",
            "index.json: manifests[0] is a string, expected an object",
        ),
        ("index", ("manifests", 0, "annotations"), [], "manifests[0].annotations is a list"),
        ("index", ("manifests", 0, "platform"), "linux", "manifests[0].platform is a string"),
        (
            "index",
            ("manifests", 0, "digest"),
            "sha256:../../x",
            "manifests[0].digest 'sha256:../../x'",
        ),
        (
            "index",
            ("manifests", 0, "digest"),
            None,
            "manifests[0].digest is null, expected a string",
        ),
        ("manifest", ("layers",), {"a": 1}, "(the manifest): layers is an object, expected a list"),
        ("manifest", ("layers", 0), 7, "layers[0] is a number, expected an object"),
        ("manifest", ("layers", 0, "digest"), None, "layers[0].digest is null, expected a string"),
        ("manifest", ("layers", 0, "digest"), "sha256:" + "Z" * 64, "layers[0].digest 'sha256:ZZZ"),
        ("manifest", ("layers", 0, "digest"), "md5:abc", "is not a digest of the form"),
        ("manifest", ("layers", 0, "size"), "12", "layers[0].size is a string, expected a number"),
        ("manifest", ("layers", 0, "mediaType"), 3, "layers[0].mediaType is a number"),
        ("manifest", ("config",), [], "config is a list, expected an object"),
        ("manifest", ("config", "digest"), "sha256:../../x", "config.digest 'sha256:../../x'"),
        ("config", None, [1], "the document is a list, expected an object"),
        ("config", ("config", "Env"), [1], "config.Env[0] is a number, expected a string"),
        ("config", ("config", "Env"), "PATH=/bin", "config.Env is a string, expected a list"),
        ("config", ("config", "Volumes"), ["/x"], "config.Volumes is a list, expected an object"),
        ("config", ("config", "Labels"), {"a": 1}, "config.Labels['a'] is a number"),
        ("config", ("config",), "x", "config is a string, expected an object"),
    ],
)
def test_malformed_oci_json(tmp_path, which, path, value, match):
    text = fails(layout_json(tmp_path, which, path, value), tmp_path, match)
    assert "\n" not in text and "fix:" in text


@pytest.mark.parametrize("which", ["index", "manifest"])
def test_deeply_nested_json(tmp_path, which):
    deep = b"[" * 100_000 + b"]" * 100_000
    fails(layout_json(tmp_path, which, None, deep), tmp_path, "is not valid JSON")


GOOD_DIFF = "sha256:" + hashlib.sha256(tar_bytes(BUSYBOX)).hexdigest()


@pytest.mark.parametrize(
    "entry,diff_id,match",
    [
        ("x", GOOD_DIFF, "manifest.json: [0] is a string, expected an object"),
        ({"Config": 5}, GOOD_DIFF, "Config is a number, expected a string"),
        (
            {"Config": "c.json", "Layers": [1]},
            GOOD_DIFF,
            "Layers[0] is a number, expected a string",
        ),
        (
            {"Config": "c.json", "Layers": [], "RepoTags": "a:b"},
            GOOD_DIFF,
            "[0].RepoTags is a string",
        ),
        (
            {"Config": "c.json", "Layers": ["l.tar"]},
            "sha256:xyz",
            "c.json: rootfs.diff_ids[0] 'sha256:xyz' is not a digest",
        ),
        ({"Config": "c.json", "Layers": ["l.tar"]}, 5, "rootfs.diff_ids[0] is a number"),
    ],
)
def test_malformed_docker_manifest(tmp_path, entry, diff_id, match):
    src = tmp_path / "docker.tar"
    config = {"rootfs": {"type": "layers", "diff_ids": [diff_id]}}
    files = {
        "manifest.json": json.dumps([entry]).encode(),
        "c.json": json.dumps(config).encode(),
        "l.tar": tar_bytes(BUSYBOX),
    }
    with tarfile.open(src, "w") as tf:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    fails(src, tmp_path, match)


def test_cli_exit_1_for_hostile_sources(tmp_path):
    """Expected failures end with one line and exit 1, never the crash handler's 70."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    neg = oci_layout(tmp_path / "neg", [tar_bytes(BUSYBOX), backwards()], gzip_layers=False)
    for args in (
        ["convert", str(fifo), str(tmp_path / "a.tar")],
        ["convert", str(neg), str(tmp_path / "b.tar")],
        ["inspect", str(neg)],
    ):
        proc = subprocess.run(
            [sys.executable, "-m", "kit", "image", *args],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 1, proc.stderr
        assert proc.stderr.startswith("kit: error: ") and proc.stderr.count("\n") == 1, proc.stderr
